"""Browser safety: a web page the user happens to visit must not spend their keys.

A page can make the browser send a request to any address, the proxy on loopback
included, without asking first ("simple" requests: a form's `text/plain` body, a
`fetch` of a typeless Blob). Two rules close that door. A request body is read only as
`application/json`, which a page cannot send without the browser's preflight, and a
request carrying an `Origin` that is neither the proxy's own nor one listed in
`server.cors_origins` is refused before anything else runs. With origins listed,
Starlette's CORS middleware answers their preflights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.errors import ProxyError

__all__ = ["OriginGuard", "middleware", "require_json"]


class OriginGuard:
    """Refuses (403 `origin_not_allowed`) a request from another origin than the proxy's
    own or the configured ones: the only clients that send `Origin` are browsers."""

    def __init__(
        self,
        app: ASGIApp,
        origins: Sequence[str],
        render: Callable[[str, ProxyError], Response],
    ) -> None:
        self.app = app
        self.origins = frozenset(origin.rstrip("/") for origin in origins)
        self.render = render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            origin = headers.get("origin")
            if origin is not None and not self._allowed(origin, headers):
                error = ProxyError(
                    403,
                    "Requests from this web origin are not allowed; list it in"
                    " server.cors_origins to allow it.",
                    code="origin_not_allowed",
                )
                await self.render(scope["path"], error)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _allowed(self, origin: str, headers: Headers) -> bool:
        if "*" in self.origins or origin in self.origins:
            return True
        # The proxy's own pages: the same host as the request names (by host, not by
        # scheme, so a proxy behind a TLS terminator still knows its own pages).
        return origin.partition("://")[2] == headers.get("host")


def middleware(
    origins: Sequence[str], render: Callable[[str, ProxyError], Response]
) -> list[Middleware]:
    """The origin guard, behind Starlette's CORS middleware when origins are listed (it
    answers their preflights, which never reach a route)."""
    guard = Middleware(OriginGuard, origins=origins, render=render)
    if not origins:
        return [guard]
    preflight = Middleware(
        CORSMiddleware,
        allow_origins=list(origins),
        allow_methods=["GET", "POST", "DELETE"],
        allow_headers=["*"],
        expose_headers=["*"],
    )
    return [preflight, guard]


def require_json(headers: Headers) -> None:
    """A 415 unless the body is declared `application/json` (parameters such as a
    charset allowed)."""
    media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise ProxyError(
            415,
            "Request body must be sent as Content-Type: application/json.",
            code="unsupported_media_type",
        )
