"""A streamed turn's events as the door reads them, and a reply made here, with no model
call, as one batch."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from proxy.conversation.identity import Message
from proxy.conversation.replies import StreamedReply
from proxy.costs.receipts import TurnCost
from proxy.engine.planner import agent_compaction
from proxy.engine.types import Observer, Turn
from proxy.upstream.lean import Events

__all__ = ["TurnEvents", "made"]


async def made(answer: dict[str, Any]) -> AsyncIterator[Events]:
    """A reply made here, as one batch of stream chunks."""
    yield Events(agent_compaction.answer_chunks(answer))


class TurnEvents:
    """A streamed turn whose reply is stored only once the stream is complete; `aclose` ends
    the turn however the stream ended."""

    def __init__(
        self,
        *,
        turn: Turn,
        events: AsyncIterator[Events],
        observer: Observer,
        answered: Callable[
            [Turn, Message | None, dict[str, Any] | None], Awaitable[TurnCost | None]
        ],
        finish: Callable[[Turn, bool], Awaitable[None]],
    ) -> None:
        self.turn = turn
        self._events = events
        self._observer = observer
        self._answered = answered
        self._finish = finish
        self._stored = False  # answered: the reply was whole, and stored (or made here)

    async def __aiter__(self) -> AsyncIterator[Events]:
        """The events as they come, the reply's end only once stored: a client that hangs up at
        the end (Codex) has a stored turn, and one told of a failed store never heard it end."""
        reply = StreamedReply()
        usage: dict[str, Any] | None = None
        held: list[Events] = []
        async for batch in self._events:
            for chunk in batch.chunks:
                reply.add(chunk)
                if chunk.get("usage"):
                    usage = chunk["usage"]
                    self._observer.used(usage)
                elif _has_output(chunk):
                    self._observer.first_token()
            if reply.finished:
                held.append(batch)
            else:
                yield batch
        self._observer.upstream_finished()
        message = reply.message()  # None: the provider ended the stream before the reply
        self._observer.priced(await self._answered(self.turn, message, usage))
        self._stored = message is not None
        for batch in held:
            yield batch

    async def aclose(self) -> None:
        await self._finish(self.turn, self._stored)


def _has_output(chunk: dict[str, Any]) -> bool:
    deltas = [choice.get("delta") or {} for choice in chunk.get("choices") or []]
    return any(delta.get("content") or delta.get("tool_calls") for delta in deltas)
