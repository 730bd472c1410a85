"""A provider's reply, read within a bound, in time linear in its size.

A whole reply, or one event of a streamed one, larger than `server.max_upstream_reply_bytes`
is read no further: the connection to the provider is closed and the turn fails (a 502,
naming the setting), with nothing of it stored. Server-sent events are cut out of the
bytes as they arrive: each byte is searched for an event's end once, and an event's
pieces are joined once, however many reads it took to arrive (a buffer grown by `+=`
and split again on every read costs the square of an event's size).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

from proxy.errors import UpstreamFailure

__all__ = ["PART", "SETTING", "EventReader", "events_of", "too_large", "whole"]

SETTING = "server.max_upstream_reply_bytes"
_END = b"\n\n"  # an event's end: a blank line (line ends made "\n" first)
PART = 256 * 1024  # a stream's bytes are cut into events this many at a time
_TURN = 1 << 20  # a whole reply's read gives other requests a turn after each MiB


def too_large(limit: int, what: str = "reply") -> UpstreamFailure:
    """The failure of a reply (or one `event` of a stream) larger than `limit` bytes."""
    said = "The provider's reply" if what == "reply" else "An event of the provider's stream"
    return UpstreamFailure(
        f"{said} is larger than {SETTING} ({limit} bytes): it was not read further,"
        " and nothing of it was kept.",
        code="upstream_reply_too_large",
    )


async def whole(response: Any, limit: int) -> bytes:
    """An aiohttp response's whole body, or `too_large` as soon as it passes `limit`
    bytes (at once, where its Content-Length says it will); the connection is then
    closed rather than read to its end."""
    declared = response.content_length
    if declared is not None and declared > limit:
        response.close()
        raise too_large(limit)
    pieces: list[bytes] = []
    size = 0
    async for piece in response.content.iter_any():
        size += len(piece)
        if size > limit:
            response.close()
            raise too_large(limit)
        pieces.append(piece)
        if size // _TURN != (size - len(piece)) // _TURN:  # its bytes may all be there
            await asyncio.sleep(0)
    return b"".join(pieces)


class EventReader:
    """Whole server-sent events out of a stream's pieces as they come (an event may span
    pieces, a piece may hold several), each at most `limit` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.scanned = 0  # bytes searched for an event's end, so far: each byte once
        self._pending: list[bytes] = []  # the pieces of the event not yet ended
        self._size = 0  # their bytes
        self._cr = False  # the last piece ended in "\r", whose "\n" may come next

    def feed(self, piece: bytes) -> list[bytes]:
        """The events `piece` ends, each without its blank line, its lines ending in
        "\\n"; `too_large` once the event not yet ended passes the limit."""
        if self._cr:
            piece = b"\r" + piece
        self._cr = piece.endswith(b"\r")
        if self._cr:
            piece = piece[:-1]
        if b"\r" in piece:
            piece = piece.replace(b"\r\n", b"\n")
        events: list[bytes] = []
        start = 0
        if piece[:1] == b"\n" and self._pending and self._pending[-1].endswith(b"\n"):
            last = self._pending.pop()  # the blank line began in the piece before
            self._size -= len(last)
            events.append(self._ended(last[:-1]))
            start = 1
        while (end := piece.find(_END, start)) >= 0:
            self.scanned += end + len(_END) - start
            events.append(self._ended(piece[start:end]))
            start = end + len(_END)
        self.scanned += len(piece) - start
        if start < len(piece):
            self._pending.append(piece[start:] if start else piece)
            self._size += len(piece) - start
            if self._size > self.limit:
                raise too_large(self.limit, "event")
        return [event for event in events if event]

    def rest(self) -> bytes:
        """What came after the last event's end (a stream closed without a blank line)."""
        rest = b"".join(self._pending).lstrip(b"\n") + (b"\r" if self._cr else b"")
        self._pending, self._size, self._cr = [], 0, False
        return rest

    def _ended(self, tail: bytes) -> bytes:
        """The event not yet ended, ended by `tail`."""
        if self._size + len(tail) > self.limit:
            raise too_large(self.limit, "event")
        pieces = self._pending
        self._pending, self._size = [], 0
        event = b"".join((*pieces, tail)) if pieces else tail
        return event.lstrip(b"\n")  # blank lines between events are no part of one


async def events_of(pieces: AsyncIterator[Any], limit: int) -> AsyncIterator[list[bytes]]:
    """The events each piece of a stream ends (bytes, or what encodes to them), each
    with its blank line; then what the stream ended on without one, if anything. A
    piece is read `PART` bytes at a time (one read takes all the bytes that came, many
    MB of a fast provider's): what each part ends is yielded before the next is read."""
    reader = EventReader(limit)
    async for piece in pieces:
        data = piece if isinstance(piece, bytes) else str(piece).encode()
        for start in range(0, len(data), PART):
            events = reader.feed(data[start : start + PART] if len(data) > PART else data)
            if events:
                yield _ended(events)
    rest = reader.rest()
    if rest.strip():
        yield [rest]


def _ended(events: Iterable[bytes]) -> list[bytes]:
    return [event + _END for event in events]
