"""A span folded into the session's next summary with the stubs it freezes: one routine for
the turn that waits and the summary made ahead, so the two never differ."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal

from proxy.concurrency import off_loop
from proxy.engine.folds.summarizer import Bill, Summaries
from proxy.engine.planner.stubs import Stubs
from proxy.engine.types import Request
from proxy.facts.ledger import Fact
from proxy.sessions.records import Checkpoint, SessionKey, StoredMessage

__all__ = ["Folding", "Ledger"]

# The facts ledger as of a session's `count`-th summary, the latest given (the archive's).
Ledger = Callable[[SessionKey, int, Checkpoint | None], Awaitable[Sequence[Fact]]]


class Folding:
    def __init__(self, summaries: Summaries, stubs: Stubs, ledger: Ledger) -> None:
        self._summaries = summaries
        self._stubs = stubs
        self._ledger = ledger

    async def fold(
        self,
        request: Request,
        span: Sequence[StoredMessage],
        after: Sequence[StoredMessage],
        *,
        end: int,
        previous: Checkpoint | None,
        summaries: int,
        recent: str,
        mode: Literal["sync", "background"],
        bill: Bill,
    ) -> Checkpoint:
        """`span` (the transcript up to `end`, where `after` begins) folded into the summary
        after `previous` with the stubs it freezes, its calls on `bill`, made or failed."""
        assert request.key is not None
        ledger = await self._ledger(request.key, summaries, previous)
        made = await self._summaries.make(
            span,
            end,
            previous,
            request.model,
            request.budget - request.system_tokens - request.tools_tokens,
            mode,
            request.provider_key,
            ledger,
            recent,
            bill,
        )
        messages = [s.message for s in after]
        work = functools.partial(
            self._stubs.with_frozen, made, previous, list(after), request.counter
        )
        frozen: Checkpoint = await off_loop(messages, work)
        return frozen
