"""The proxy's connections to providers: one keep-alive pool, and the race every HTTP/1.1
client runs with it.

A provider may close a kept-alive connection once it has been idle for a while (uvicorn
after 5 s, nginx after 75 s, a load balancer after its own timeout), and the close can
cross a request the proxy has just sent on it; with its event loop busy (a large reply
being read, say), the proxy may also not yet have read a close that came before the
request went out. Either way the request fails with nothing of a reply come back: the
connection was closed under it. As browsers do, such a request is sent once more, on a
new connection. Nothing else is ever sent again here: not a request any byte of whose
reply came back (its provider took it up), not one that failed on a connection it
opened for it, not one that timed out. The second sending is part of the same attempt:
the Router's retries and cooldowns, and the request's one deadline, see one call.

Both ways past the Router use this pool: the lean path (`proxy.upstream.lean`), and
LiteLLM's own calls, given it as their `shared_session` (its OpenAI chat and Responses
routes read it) and, for its chat translation to Anthropic's deployments, which does
not, as their HTTP client (`proxy.upstream.client`). LiteLLM's Messages route reads
neither and keeps connections of its own.

Every reply on the pool is read within `server.max_upstream_reply_bytes`, however it is
read (`_Capped`): the whole of it, or each event of a stream. LiteLLM's calls read a
reply whole before they look at it, and one that never ended was read, decoded,
searched and quoted in its exception's text, tens of MB, for seconds of the event loop.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.payload import BytesPayload

from proxy.upstream import reading
from proxy.upstream.pieces import Pieces

__all__ = ["session"]

# How a connection closed under a request fails it (cleanly, or reset; while the request
# was being written, or before its reply began). A timeout is none of these.
_CLOSED = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)


def session(limit: int) -> aiohttp.ClientSession:
    """The keep-alive pool, to be made in the event loop that uses it; its replies are
    read within `limit` bytes (the whole, or each event of a stream)."""
    connector = _Connector(limit=0, ttl_dns_cache=300)
    capped = type("CappedResponse", (_CappedResponse,), {"limit": limit})
    return aiohttp.ClientSession(
        connector=connector, middlewares=(_sent_again_if_unanswered,), response_class=capped
    )


class _CappedResponse(aiohttp.ClientResponse):
    """aiohttp's response, its body read within `limit` bytes (`_Capped`)."""

    limit = 0

    async def start(self, connection: Any) -> aiohttp.ClientResponse:
        await super().start(connection)
        events = self.content_type == "text/event-stream"
        self.content = cast(
            "Any", _Capped(reader=self.content, response=self, limit=self.limit, events=events)
        )
        return self


class _Capped:
    """A reply's body as aiohttp reads it, however it is read (LiteLLM's transport reads
    it in chunks, the lean path as it comes): once the whole of it, or of a stream the
    event not yet ended, passes `limit` bytes, the connection is closed and the read
    fails (`reading.too_large`). An event ends at a blank line; one split across two
    reads may be counted on a little: a bound, not a parser."""

    def __init__(self, *, reader: Any, response: aiohttp.ClientResponse, limit: int, events: bool):
        self._reader = reader
        self._response = response
        self._limit = limit
        self._events = events
        self._size = 0  # of the reply, or of the event not yet ended
        self._line = False  # the last read ended a line

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)

    def _counted(self, data: bytes) -> bytes:
        if not self._events:
            self._size += len(data)
        else:
            end = max(data.rfind(b"\n\n"), data.rfind(b"\n\r\n"))
            if end < 0 and self._line and data[:1] in (b"\n", b"\r"):
                end = 0
            self._size = len(data) - end if end >= 0 else self._size + len(data)
            self._line = data.endswith(b"\n")
        if self._limit and self._size > self._limit:
            self._response.close()
            raise reading.too_large(self._limit, "event" if self._events else "reply")
        return data

    async def _pieces(self, pieces: Any) -> AsyncIterator[bytes]:
        async for piece in pieces:
            yield self._counted(piece)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._pieces(self._reader)

    def iter_any(self) -> AsyncIterator[bytes]:
        return self._pieces(self._reader.iter_any())

    def iter_chunked(self, n: int) -> AsyncIterator[bytes]:
        return self._pieces(self._reader.iter_chunked(n))

    async def iter_chunks(self) -> AsyncIterator[tuple[bytes, bool]]:
        async for piece, ended in self._reader.iter_chunks():
            yield self._counted(piece), ended

    async def read(self, n: int = -1) -> bytes:
        return self._counted(await self._reader.read(n))

    async def readany(self) -> bytes:
        return self._counted(await self._reader.readany())

    async def readchunk(self) -> tuple[bytes, bool]:
        piece, ended = await self._reader.readchunk()
        return self._counted(piece), ended

    async def readline(self, **options: Any) -> bytes:
        return self._counted(await self._reader.readline(**options))

    async def readuntil(self, separator: bytes = b"\n", **options: Any) -> bytes:
        return self._counted(await self._reader.readuntil(separator, **options))

    async def readexactly(self, n: int) -> bytes:
        return self._counted(await self._reader.readexactly(n))

    def read_nowait(self, n: int = -1) -> bytes:
        return self._counted(self._reader.read_nowait(n))


class _Counting(ResponseHandler):
    """aiohttp's protocol of one connection, counting the bytes it has received: a reply
    that began, by a single byte, is told from none."""

    received = 0

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        super().data_received(data)


@dataclass(slots=True)
class _Sending:
    """One request's sending: the connection it went out on, and what that connection
    had received before."""

    connection: _Counting | None = None
    before: int = 0
    new_connection: bool = False  # the second sending: on a connection opened for it

    def unanswered(self) -> bool:
        """Sent on a kept-alive connection (one that had answered before), and nothing
        of a reply came back on it since."""
        sent_on = self.connection
        return sent_on is not None and self.before > 0 and sent_on.received == self.before


_SENDING: contextvars.ContextVar[_Sending | None] = contextvars.ContextVar(
    "context_proxy_sending", default=None
)


class _Connector(aiohttp.TCPConnector):
    """aiohttp's connector, whose connections count what they receive, and which tells
    each request's sending (`_SENDING`) the connection it got."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        # aiohttp's protocol factory is private: tests/integration/test_upstream_keepalive.py
        # fails if its connections stop counting.
        counting = functools.partial(_Counting, loop=self._loop)
        self._factory = cast("functools.partial[ResponseHandler]", counting)

    async def connect(
        self, req: aiohttp.ClientRequest, traces: list[Any], timeout: aiohttp.ClientTimeout
    ) -> Any:
        sending = _SENDING.get()
        while True:
            connection = await super().connect(req, traces, timeout)
            protocol = connection.protocol
            if sending is None or not isinstance(protocol, _Counting):
                return connection
            if sending.new_connection and protocol.received:
                # A kept-alive one, idle as the one closed under the first sending was:
                # the provider may have closed it too. Let go until a new one opens.
                connection.close()
                continue
            sending.connection, sending.before = protocol, protocol.received
            return connection


async def _sent_again_if_unanswered(
    request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
) -> aiohttp.ClientResponse:
    """The client middleware that sends a request once more, on a new connection, where
    a kept-alive connection was closed under it before any byte of its reply came."""
    sending = _Sending()
    token = _SENDING.set(sending)
    try:
        try:
            return await handler(request)
        except _CLOSED:
            if not sending.unanswered() or not _resendable(request):
                raise
        sending.connection, sending.new_connection = None, True
        return await handler(request)
    finally:
        _SENDING.reset(token)


def _resendable(request: aiohttp.ClientRequest) -> bool:
    """Whether the request's body can be sent again as it was (bytes, not a stream
    already read)."""
    body = request.body
    return body == b"" or isinstance(body, BytesPayload | Pieces)
