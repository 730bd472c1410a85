"""A span folded into the session's next summary with the stubs it freezes: one routine for
the turn that waits and the summary made ahead, so the two never differ. Where it pays, the
summary is asked of the session's last prompt as its next turn (`continuing`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal

from proxy.concurrency import off_loop
from proxy.engine.folds.continuing import Continuing
from proxy.engine.folds.summarizer import Bill, Summaries
from proxy.engine.planner.payoff import SHARES
from proxy.engine.planner.stubs import Stubs
from proxy.engine.types import Request
from proxy.facts.ledger import Fact
from proxy.sessions.records import Checkpoint, SessionKey, StoredMessage

__all__ = ["Folding", "Ledger"]

# The facts ledger as of a session's `count`-th summary, the latest given (the archive's).
Ledger = Callable[[SessionKey, int, Checkpoint | None], Awaitable[Sequence[Fact]]]


class Folding:
    def __init__(
        self,
        summaries: Summaries,
        stubs: Stubs,
        ledger: Ledger,
        continuing: Continuing,
        clock: Callable[[], float],
    ) -> None:
        self._summaries = summaries
        self._stubs = stubs
        self._ledger = ledger
        self._continuing = continuing
        self._clock = clock  # the engine's: when a prompt was sent, and now

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
        continuation = None
        if self._summaries.model_for(request.model) == request.model:
            name = request.counter.name
            apart = sum(s.tokens.get(name, 0) for s in span) + (previous.tokens if previous else 0)
            continuation = self._continuing.continuation(
                request.key,
                span,
                after,
                end=end,
                previous=previous,
                model=request.model,
                prices=request.prices,
                apart=apart,
                now=self._clock(),
                budget=request.budget,
            )
        # What the budget leaves beside system, tools and the window the fold keeps (as
        # stored: stubs make it smaller), and at least what the largest kept share leaves.
        room = request.budget - request.system_tokens - request.tools_tokens
        kept = sum(s.tokens.get(request.counter.name, 0) for s in after)
        room = max(room - kept, math.floor((1 - SHARES[-1]) * room))
        made = await self._summaries.make(
            span,
            end,
            previous,
            request.model,
            room,
            mode,
            request.provider_key,
            ledger,
            recent,
            bill,
            continuation,
        )
        messages = [s.message for s in after]
        work = functools.partial(
            self._stubs.with_frozen, made, previous, list(after), request.counter
        )
        frozen: Checkpoint = await off_loop(messages, work)
        return frozen
