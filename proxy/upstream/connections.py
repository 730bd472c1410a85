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
"""

from __future__ import annotations

import contextvars
import functools
from dataclasses import dataclass
from typing import Any, cast

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.payload import BytesPayload

__all__ = ["session"]

# How a connection closed under a request fails it (cleanly, or reset; while the request
# was being written, or before its reply began). A timeout is none of these.
_CLOSED = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)


def session() -> aiohttp.ClientSession:
    """The keep-alive pool, to be made in the event loop that uses it."""
    connector = _Connector(limit=0, ttl_dns_cache=300)
    return aiohttp.ClientSession(connector=connector, middlewares=(_sent_again_if_unanswered,))


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
    return body == b"" or isinstance(body, BytesPayload)
