"""Browser safety: a web page the user happens to visit must not spend their keys.

A page can make the browser send a request to any address, the proxy on loopback
included, without asking first ("simple" requests: a form's `text/plain` body, a
`fetch` of a typeless Blob). Three rules close that door. A request body is read only as
`application/json`, which a page cannot send without the browser's preflight; a
request carrying an `Origin` that is neither the proxy's own nor one listed in
`server.cors_origins` is refused before anything else runs; and so is one naming a host
the proxy does not answer to (`Settings.allowed_hosts`: without keys, only loopback
names), since a page can have its own name resolve to 127.0.0.1 (DNS rebinding) and be
the proxy's "own" origin by every other measure. With origins listed, Starlette's CORS
middleware answers their preflights, never granting credentials.

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

__all__ = [
    "PAGE_HEADER",
    "OriginGuard",
    "from_own_page",
    "middleware",
    "require_json",
]

# Sent by the proxy's own page's script with every call it makes (the viewer's login's
# page token, once it has one): a header a page of another origin can send only after a
# preflight, which never grants it credentials.
PAGE_HEADER = "X-Context-Proxy-Page"


class OriginGuard:
    """Refuses what a browser may have been tricked into sending: a request naming a host
    the proxy does not answer to (403 `host_not_allowed`: DNS rebinding, where a page's own
    name is made to point at 127.0.0.1), or one from another web origin than the proxy's
    own or the configured ones (403 `origin_not_allowed`: the only clients that send
    `Origin` are browsers)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        origins: Sequence[str],
        hosts: frozenset[str] | None,
        render: Callable[[str, ProxyError], Response],
    ) -> None:
        self.app = app
        self.origins = frozenset(origin.rstrip("/") for origin in origins)
        self.hosts = hosts  # None: any
        self.render = render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            error = self._refusal(headers)
            if error is not None:
                await self.render(scope["path"], error)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, headers: Headers) -> ProxyError | None:
        host = headers.get("host")
        if host is not None and self.hosts is not None and _host_name(host) not in self.hosts:
            return PermissionDenied(
                "This proxy does not answer to that host name; list it in"
                " server.allowed_hosts to allow it.",
                code="host_not_allowed",
            )
        origin = headers.get("origin")
        if origin is None or "*" in self.origins or origin in self.origins:
            return None
        if _own(origin, headers):
            return None
        return PermissionDenied(
            "Requests from this web origin are not allowed; list it in"
            " server.cors_origins to allow it.",
            code="origin_not_allowed",
        )


def _host_name(authority: str) -> str:
    """The host of a `Host` header or an origin's authority, lower case, without its port
    (`[::1]:4000` is `[::1]`)."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority.partition("]")[0] + "]"
    return authority.partition(":")[0].rstrip(".")


def _own(origin: str, headers: Headers) -> bool:
    """Whether `origin` is the proxy's own: the host and port the request came to, by a
    name the guard let in (by host, not by scheme, so a proxy behind a TLS terminator
    still knows its pages)."""
    return origin.partition("://")[2].lower() == headers.get("host", "").lower()


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
    origins: Sequence[str],
    hosts: frozenset[str] | None,
    render: Callable[[str, ProxyError], Response],
) -> list[Middleware]:
    """The guard, behind Starlette's CORS middleware when origins are listed (it answers
    their preflights, which never reach a route)."""
    guard = Middleware(OriginGuard, origins=origins, hosts=hosts, render=render)
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
