"""A turn's reply as server-sent events: the turn's events framed by its door and
written in bounded parts, a failure mid-stream as the door's error event, and the
response that ends the turn however its stream ends."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from proxy.concurrency import Turns, sized
from proxy.doors.base import Framer
from proxy.engine import TurnEvents
from proxy.errors import ProxyError
from proxy.http.errors import CLIENT_CLOSED_REQUEST, error_reply, internal_error, status_of
from proxy.http.telemetry import RequestTelemetry

__all__ = ["TurnStream", "framed_events"]

logger = logging.getLogger("context_proxy.doors")

# A stream's bytes are written at most this many at a time: each write copies them once
# more (its chunk's framing), and a Responses end repeats the whole reply.
_WRITE = 1 << 20


async def framed_events(
    events: TurnEvents,
    telemetry: RequestTelemetry,
    framer: Framer,
    scrub: Callable[[str], str],
) -> AsyncIterator[bytes]:
    """The reply as the door frames it. A failure mid-stream (the reply could not be
    stored, too) becomes the door's error event, its message `scrub`bed of credentials,
    and no end of stream, so the client can tell a cut-off reply from a finished one. A
    client that disconnects cancels this generator, and with it the upstream call."""
    status = CLIENT_CLOSED_REQUEST
    native = False  # the provider's own events, its end of stream included
    turns = Turns()  # the others' turns, however fast the provider's events come
    relayed = 0
    try:
        async for batch in events:
            native = batch.native
            if native:
                framed = framer.relay(batch.raw or b"")
            else:
                framed = framer.chunks(batch.chunks, batch.raw)
            relayed += len(framed)
            for part in _parts(framed):
                yield part
                await turns.taken()
        status = 200
    except ProxyError as exc:
        status = status_of(exc)
        scrubbed = exc.redacted(scrub)
        logger.warning("a %s stream failed (%d): %s", events.turn.model, status, scrubbed.message)
        yield framer.error(error_reply(scrubbed))
        return
    except Exception:  # a fault of ours: still the door's error event, never a cut
        status = 500
        logger.exception("a %s stream failed (500)", events.turn.model)
        yield framer.error(error_reply(internal_error()))
        return
    finally:
        telemetry.finish(status)
    if not native:  # the end may repeat the whole reply (Responses' does, four times)
        for framed in await sized(relayed, framer.end):
            for part in _parts(framed):
                yield part
                await turns.taken()


def _parts(framed: bytes) -> Iterator[bytes]:
    """`framed` in writes of at most `_WRITE` bytes."""
    if len(framed) <= _WRITE:
        yield framed
        return
    for start in range(0, len(framed), _WRITE):
        yield framed[start : start + _WRITE]


class TurnStream(StreamingResponse):
    """A streamed reply that ends its turn (`finish`) however the stream ends: done,
    failed, or cut off by the client before or after it began."""

    def __init__(
        self, content: AsyncIterator[bytes], finish: Callable[[], Awaitable[None]], **kwargs: Any
    ) -> None:
        super().__init__(content, **kwargs)
        self._finish = finish

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._finish()
