"""The session viewer at `/ui`: one page, a script and a style sheet, served as they are
(no build step), showing through the sessions API what each turn sent.

The page is behind the keys like every route. A browser cannot put a key in the header
of a page it navigates to, so `/ui` also takes the key from the `context_proxy_key`
cookie the page's own login form sets (`SameSite=Strict`, path `/ui`); without a key it
answers 401 with that form. The page reads the cookie and calls the API with the key as
`Authorization: Bearer`, so the API itself never accepts a cookie, and no other page can
make a browser spend it. The script and style sheet hold no data and are served to
anyone; the page never writes what it shows as HTML (text only), and its policy allows
only its own script.
"""

from __future__ import annotations

import functools
from pathlib import Path
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Scope

from proxy.errors import ProxyError

__all__ = ["ASSETS", "COOKIE", "PAGE", "login_page", "routes", "ui_credential"]

PAGE = "/ui"
COOKIE = "context_proxy_key"
_STATIC = Path(__file__).with_name("static")
_TYPES = {"viewer.js": "text/javascript", "viewer.css": "text/css"}
ASSETS = frozenset(f"{PAGE}/{name}" for name in _TYPES)  # open: no data in them
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self';"
        " img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def ui_credential(scope: Scope) -> str | None:
    """The key the viewer page's cookie carries, for the page itself only."""
    if scope["path"] != PAGE:
        return None
    for name, value in scope.get("headers", ()):
        if name != b"cookie":
            continue
        for pair in value.decode("latin-1").split(";"):
            key, _, found = pair.strip().partition("=")
            if key == COOKIE and found:
                return unquote(found)
    return None


def login_page(exc: ProxyError) -> Response:
    """`/ui` without a (valid) key: the page, which shows its key form, as a 401."""
    return _page(exc.status_code)


async def page(request: Request) -> Response:
    return _page(200)


def _page(status: int) -> Response:
    return Response(_read("viewer.html"), status, headers=_HEADERS, media_type="text/html")


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in _TYPES:
        raise ProxyError(404, f"No such file `{name}`.", code="not_found")
    return Response(_read(name), headers=_HEADERS, media_type=_TYPES[name])


def routes() -> list[Route]:
    return [
        Route(PAGE, page, methods=["GET"]),
        Route(PAGE + "/{name}", asset, methods=["GET"]),
    ]


@functools.cache
def _read(name: str) -> bytes:
    return (_STATIC / name).read_bytes()
