"""A request body sent as the pieces it is made of: a long conversation's messages are
megabytes, and joining them to the parameters around them, then to the request's
headers (aiohttp joins the first write to the headers), copied them twice more."""

from __future__ import annotations

from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import Payload

__all__ = ["Pieces"]


class Pieces(Payload):
    """Bytes written one piece after another (the first, small, goes with the headers),
    and again as they were where a request is sent once more."""

    _autoclose = True  # nothing to close: bytes in memory

    def __init__(self, pieces: tuple[bytes, ...], content_type: str = "application/json") -> None:
        super().__init__(pieces, content_type=content_type)
        self._pieces = pieces
        self._size = sum(map(len, pieces))

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(self._pieces).decode(encoding, errors)

    async def as_bytes(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return b"".join(self._pieces)

    async def write(self, writer: AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(
        self, writer: AbstractStreamWriter, content_length: int | None
    ) -> None:
        left = content_length
        for piece in self._pieces:
            if left is not None:
                piece, left = piece[:left], left - min(left, len(piece))
            if piece:
                await writer.write(piece)
            if left == 0:
                return
