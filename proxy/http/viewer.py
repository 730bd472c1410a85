"""The session viewer at `/ui`: one page, a script and a style sheet, served as they are
(no build step), showing through the sessions API what each turn sent.

No key is kept in the browser. The page's login form posts the key once (`POST
/ui/login`, as `Authorization: Bearer`, authenticated like any call) and is answered
with a login of the proxy's making, in two halves that are worth nothing apart, for
`LOGIN_SECONDS` or until `POST /ui/logout` revokes it:

- a random token in an `HttpOnly`, `SameSite=Strict` cookie on `/ui`, which no script
  reads. Cookies ignore ports: the browser sends it to a server on another port of the
  host as well (under `/ui`), and a page there is the same site, so the cookie's name
  carries the port (two proxies on one host keep their logins apart) and it is never
  enough on its own;
- a random page token in the answer's body, which the page keeps in its origin's
  `localStorage` (scoped by port, unlike cookies) and sends as `X-Context-Proxy-Page`
  with each call; a call bearing it comes from the proxy's origin or asked the browser
  first, which never grants another origin credentials (`proxy/browser.py`).

The store keeps the hashes of the two tokens with the caller's tenant, admin flag,
models, expiry and its key's tag (`Auth.tag`: a login lasts while its key is configured,
under that key's rate limit), in the memories table under a tenant no key can name, so
every worker sees it: never a key nor a token. The cookie is honoured on the viewer's paths
only (the page, and the sessions API again under `/ui/api`), for requests the browser
says came from the proxy's own page (`browser.from_own_page`); the page itself, which
holds no data, opens with the cookie alone. Keys in the headers work on the viewer's
paths as everywhere; without a key or login `/ui` answers 401 with the login form. The
script and style sheet hold no data and are served to anyone; the page never writes
what it shows as HTML (text only), and its policy allows only its own script.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from starlette.datastructures import Headers
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Scope

from proxy.doors.base import ErrorReply
from proxy.errors import InternalError, NotFound, PermissionDenied, Unauthenticated
from proxy.http.auth import Auth, Principal, credential
from proxy.http.bodies import principal
from proxy.http.browser import PAGE_HEADER, from_own_page

if TYPE_CHECKING:
    from proxy.http.sessions import SessionApi

__all__ = ["ASSETS", "LOGIN_SECONDS", "OPEN", "PAGE", "Viewer", "cookie_name", "login_page"]

PAGE = "/ui"
API = PAGE + "/api"  # the sessions API, for the page's login cookie
LOGIN = PAGE + "/login"
LOGOUT = PAGE + "/logout"
LOGIN_SECONDS = 8 * 3600
# The store's tenant for logins: no configured tenant (a letter or digit first) nor a
# derived one (hex, or `anonymous`) can be named so.
LOGINS = "~viewer-logins"
_COOKIE = "context_proxy_viewer"
_STATIC = Path(__file__).with_name("static")
_TYPES = {"viewer.js": "text/javascript", "viewer.css": "text/css"}
ASSETS = frozenset(f"{PAGE}/{name}" for name in _TYPES)  # open: no data in them
OPEN = ASSETS | {LOGOUT}  # logout spends nothing: it ends a login, if it names one
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self';"
        " img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _clock() -> float:
    return time.time()


def cookie_name(connection: HTTPConnection) -> str:
    """The login cookie's name for the origin the browser used: its port in the name (a
    browser shares a host's cookies across its ports), `__Secure-` over https."""
    url = connection.url
    secure = url.scheme == "https"
    try:
        port = url.port or (443 if secure else 80)
    except ValueError:  # a Host header naming no port a browser would use
        port = 0
    return f"{'__Secure-' if secure else ''}{_COOKIE}_{port}"


def _tokens(connection: HTTPConnection) -> list[str]:
    """The login cookie's values: a page on another port of the host may have set one of
    the same name on a longer path, which the browser sends first; each is tried."""
    name = cookie_name(connection)
    found: list[str] = []
    for value in connection.headers.getlist("cookie"):
        for pair in value.split(";"):
            key, _, token = pair.strip().partition("=")
            if key == name and token and len(found) < 4:
                found.append(token)
    return found


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Viewer:
    """The viewer's routes, and its logins, kept in the session store."""

    def __init__(self, sessions: SessionApi, auth: Auth) -> None:
        self.sessions = sessions
        self.store = sessions.store
        self.auth = auth

    def routes(self) -> list[Route]:
        sessions = self.sessions
        return [
            Route(PAGE, page, methods=["GET"]),
            Route(LOGIN, self.login, methods=["POST"]),
            Route(LOGOUT, self.logout, methods=["POST"]),
            Route(API + "/sessions", sessions.list, methods=["GET"]),
            Route(API + "/sessions/{session_id}", sessions.get, methods=["GET"]),
            Route(API + "/sessions/{session_id}", sessions.delete, methods=["DELETE"]),
            Route(API + "/sessions/{session_id}/search", sessions.search, methods=["GET"]),
            Route(API + "/sessions/{session_id}/plans", sessions.plans, methods=["GET"]),
            Route(PAGE + "/{name}", asset, methods=["GET"]),
        ]

    async def principal(self, scope: Scope) -> Principal | None:
        """The caller a viewer's request without a key names by its login cookie: on the
        page and its API only, and only from the proxy's own page."""
        path = scope["path"]
        if path != PAGE and not path.startswith(API + "/"):
            return None
        connection = HTTPConnection(scope)
        navigation = path == PAGE and scope["method"] in ("GET", "HEAD")
        if not from_own_page(connection.headers, navigation):
            return None
        # The page's token, but for the page itself (a navigation cannot send it).
        page_token = None if navigation else connection.headers[PAGE_HEADER]
        for token in _tokens(connection):
            found = await self._login(token, page_token)
            if found is not None:
                return found
        return None

    async def _login(self, token: str, page_token: str | None) -> Principal | None:
        found = await self.store.memory(LOGINS, _digest(token))
        if found is None:
            return None
        try:
            record = orjson.loads(found[1])
            tenant, admin, models = record["tenant"], record["admin"], record["models"]
            expires, page = float(record["expires"]), str(record["page"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None
        if record.get("object") != "viewer.login" or not isinstance(tenant, str):
            return None
        if expires <= _clock():
            await self.store.delete_memory(LOGINS, _digest(token))
            return None
        if page_token is not None and not hmac.compare_digest(_digest(page_token), page):
            return None
        presented = (token,) if page_token is None else (token, page_token)
        if isinstance(record.get("key"), str):  # a configured key's: while it is configured
            return self.auth.tagged(record["key"], tenant, presented)
        return Principal(
            tenant=tenant,
            admin=admin is True,
            models=frozenset(models) if models is not None else None,
            presented=presented,
        )

    async def login(self, request: Request) -> Response:
        """`POST /ui/login` with the key as `Authorization: Bearer`: the login cookie,
        and the page token (`{"page_token": …, "expires_in": seconds}`)."""
        _own_page(request.headers)
        if credential(request.headers) is None:
            raise Unauthenticated(
                "Log in with a proxy key as `Authorization: Bearer …`.", code="missing_api_key"
            )
        caller = principal(request)
        key = credential(request.headers)
        await self._revoke(request)  # a login this browser held before
        token, page_token = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        record = {
            "object": "viewer.login",
            "tenant": caller.tenant,
            "admin": caller.admin,
            "models": sorted(caller.models) if caller.models is not None else None,
            "expires": int(_clock()) + LOGIN_SECONDS,
            "page": _digest(page_token),
            "key": self.auth.tag(key) if key is not None else None,
        }
        if not await self.store.put_memory(LOGINS, _digest(token), 0, orjson.dumps(record)):
            raise InternalError("The login could not be stored.", code="internal_error")
        body = {"object": "viewer.login", "page_token": page_token, "expires_in": LOGIN_SECONDS}
        response = Response(orjson.dumps(body), headers=_HEADERS, media_type="application/json")
        response.set_cookie(
            cookie_name(request),
            token,
            max_age=LOGIN_SECONDS,
            path=PAGE,
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return response

    async def logout(self, request: Request) -> Response:
        """`POST /ui/logout`: the login revoked in the store, and its cookie cleared."""
        _own_page(request.headers)
        await self._revoke(request)
        response = Response(status_code=204, headers=_HEADERS)
        response.delete_cookie(
            cookie_name(request),
            path=PAGE,
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return response

    async def _revoke(self, request: Request) -> None:
        for token in _tokens(request):
            await self.store.delete_memory(LOGINS, _digest(token))


def _own_page(headers: Headers) -> None:
    if not from_own_page(headers):
        raise PermissionDenied(
            "Only the viewer's own page may log in or out.", code="origin_not_allowed"
        )


def login_page(error: ErrorReply) -> Response:
    """`/ui` without a (valid) key or login: the page, which shows its login form, with
    the error's status (a 401)."""
    return _page(error.status)


async def page(request: Request) -> Response:
    return _page(200)


def _page(status: int) -> Response:
    return Response(_read("viewer.html"), status, headers=_HEADERS, media_type="text/html")


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in _TYPES:
        raise NotFound(f"No such file `{name}`.", code="not_found")
    return Response(_read(name), headers=_HEADERS, media_type=_TYPES[name])


@functools.cache
def _read(name: str) -> bytes:
    return (_STATIC / name).read_bytes()
