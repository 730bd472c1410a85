"""Browser safety: a web page the user happens to visit must not spend their keys.

A page can make the browser send a request to any address, the proxy on loopback
included, without asking first ("simple" requests: a form's `text/plain` body, a
`fetch` of a typeless Blob). Two rules close that door. A request body is read only as
`application/json`, which a page cannot send without the browser's preflight, and a
request carrying an `Origin` that is neither the proxy's own nor one listed in
`server.cors_origins` is refused before anything else runs. With origins listed,
Starlette's CORS middleware answers their preflights, never granting credentials.

The session viewer's login cookie is held to a stricter rule (`from_own_page`): a page
on another port of the same host is another origin but the same site, so the browser
sends it `SameSite=Strict` cookies, and `server.cors_origins` names origins that may call
the API with keys, not spend the viewer's login. (Cookies ignore ports altogether: the
server on another port is sent the cookie too, so the viewer wants a second value with
it, which only its own origin's storage holds: `proxy/viewer.py`.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.errors import PermissionDenied, ProxyError, UnsupportedMediaType

__all__ = ["PAGE_HEADER", "OriginGuard", "from_own_page", "middleware", "require_json"]

# Sent by the proxy's own page's script with every call it makes (the viewer's login's
# page token, once it has one): a header a page of another origin can send only after a
# preflight, which never grants it credentials.
PAGE_HEADER = "X-Context-Proxy-Page"


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
                error = PermissionDenied(
                    "Requests from this web origin are not allowed; list it in"
                    " server.cors_origins to allow it.",
                    code="origin_not_allowed",
                )
                await self.render(scope["path"], error)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _allowed(self, origin: str, headers: Headers) -> bool:
        return "*" in self.origins or origin in self.origins or _own(origin, headers)


def _own(origin: str, headers: Headers) -> bool:
    """Whether `origin` is the proxy's own: the same host and port as the request names
    (by host, not by scheme, so a proxy behind a TLS terminator still knows its pages)."""
    return origin.partition("://")[2] == headers.get("host")


def from_own_page(headers: Headers, navigation: bool = False) -> bool:
    """Whether a request came from the proxy's own page, as a cookie it holds may be
    spent only then: its `Sec-Fetch-Site` (sent by current browsers to https and
    loopback) says `same-origin` (`none` too for a `navigation`: an address typed or
    bookmarked), its `Origin`, if any, is the proxy's own (not a listed one), and a
    script's call carries `PAGE_HEADER` (which makes a call from another origin ask
    first, over plain http on another host too, where no `Sec-Fetch-Site` is sent).
    What the header holds is the caller's to check."""
    site = headers.get("sec-fetch-site")
    if site is not None and site != "same-origin" and not (navigation and site == "none"):
        return False
    origin = headers.get("origin")
    if origin is not None and not _own(origin, headers):
        return False
    return navigation or bool(headers.get(PAGE_HEADER))


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
        raise UnsupportedMediaType(
            "Request body must be sent as Content-Type: application/json.",
            code="unsupported_media_type",
        )
