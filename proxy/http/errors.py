"""The one table where a domain error (`proxy.errors`) becomes HTTP: its status, its
OpenAI error type, its headers, and the body in the shape of the door it was meant for
(Anthropic's on the Messages API, the login page on the viewer's, OpenAI's elsewhere).
Beside it, the app's handlers of what a request raises: every error body leaves through
them (or a stream's error event, `proxy.http.sse`). Nothing below this layer knows a
status code.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy import errors
from proxy.doors.anthropic import anthropic_error
from proxy.doors.base import ErrorReply
from proxy.http import viewer
from proxy.http.auth import Principal
from proxy.http.bodies import too_deep
from proxy.observability.redaction import Redactor

__all__ = [
    "CLIENT_CLOSED_REQUEST",
    "OPENAI_TYPES",
    "STATUS",
    "client_gone",
    "error_reply",
    "error_response",
    "http_error",
    "internal_error",
    "proxy_error_handler",
    "reply_response",
    "too_deep_error",
    "unexpected_error",
]

logger = logging.getLogger("context_proxy.doors")

# nginx's status for a client that went away before the response was complete.
CLIENT_CLOSED_REQUEST = 499

# Most specific first is not needed: an error takes the status of the first of its
# classes (its own, then its bases) found here.
STATUS: dict[type[errors.ProxyError], int] = {
    errors.InvalidRequest: 400,
    errors.ContextOverflow: 400,
    errors.Unauthenticated: 401,
    errors.PermissionDenied: 403,
    errors.NotFound: 404,
    errors.RequestTimeout: 408,
    errors.SessionConflict: 409,
    errors.RequestTooLarge: 413,
    errors.UnsupportedMediaType: 415,
    errors.RateLimited: 429,
    errors.InternalError: 500,
    errors.UpstreamFailure: 502,  # or the provider's own status, where it answered one
    errors.StoreUnavailable: 503,
    errors.UpstreamTimeout: 504,
}

OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def status_of(error: errors.ProxyError) -> int:
    """The HTTP status `error` is answered with."""
    if isinstance(error, errors.UpstreamFailure) and error.provider_status is not None:
        return error.provider_status
    for kind in type(error).__mro__:
        if kind in STATUS:
            return STATUS[kind]
    return 500


def error_reply(error: errors.ProxyError, headers: Mapping[str, str] | None = None) -> ErrorReply:
    """`error` as a door writes it; `headers` are added to its own (`Retry-After`)."""
    status = status_of(error)
    kind = OPENAI_TYPES.get(status, "api_error")
    if isinstance(error, errors.UpstreamFailure) and status >= 500:
        kind = "upstream_error"
    found = dict(headers or {})
    if error.retry_after is not None:
        found["Retry-After"] = error.retry_after
    return ErrorReply(status, kind, error.message, error.code, error.param, found or None)


def error_response(
    path: str, error: errors.ProxyError, headers: Mapping[str, str] | None = None
) -> Response:
    """The answer to a request for `path` that failed with `error`."""
    return reply_response(path, error_reply(error, headers))


def reply_response(path: str, error: ErrorReply) -> Response:
    """An error in the shape of the door it was meant for: Anthropic's for the Messages
    API, the login page for the viewer's, OpenAI's everywhere else."""
    if path.startswith("/v1/messages"):
        return anthropic_error(error)
    if path == viewer.PAGE:
        return viewer.login_page(error)
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def internal_error() -> errors.ProxyError:
    """A fault of ours, as the client is told of it."""
    return errors.InternalError("Internal error in context-proxy.", code="internal_error")


# -- the app's exception handlers ---------------------------------------------------------


def proxy_error_handler(redact: Redactor) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The handler of the domain's errors, scrubbing what `redact` knows of credentials."""

    async def proxy_error(request: Request, exc: Exception) -> Response:
        """Every error body leaves through here (or a stream's error event), scrubbed of
        every credential known and of what the caller presented."""
        assert isinstance(exc, errors.ProxyError)
        caller = request.scope.get("state", {}).get("principal")
        own = caller.presented if isinstance(caller, Principal) else ()
        scrubbed = exc.redacted(lambda text: redact(text, own))
        status = status_of(scrubbed)
        if status >= 500:  # ours or the provider's: the operator's to know
            logger.warning("%s answered %d: %s", request.url.path, status, scrubbed.message)
        extra = request.scope.get("state", {}).get("error_headers")
        return error_response(request.url.path, scrubbed, extra)

    return proxy_error


async def too_deep_error(request: Request, exc: Exception) -> Response:
    """orjson writes at most 255 levels of nesting (it reads 1,024): a request whose JSON
    nests deeper cannot be hashed, stored or sent on. orjson says so with a TypeError
    (its JSONEncodeError); any other TypeError is a fault of ours, a 500."""
    if isinstance(exc, TypeError) and str(exc) != "Recursion limit reached":
        raise exc
    return error_response(request.url.path, too_deep())


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own HTTP errors, in OpenAI's shape (or the door's)."""
    assert isinstance(exc, HTTPException)
    kind = OPENAI_TYPES.get(exc.status_code, "api_error")
    error = ErrorReply(exc.status_code, kind, str(exc.detail), code=str(exc.status_code))
    return reply_response(request.url.path, error)


async def client_gone(request: Request, exc: Exception) -> Response:
    """Nobody is left to read an answer: no error of ours, and nothing to log."""
    return Response(status_code=CLIENT_CLOSED_REQUEST)


async def unexpected_error(request: Request, exc: Exception) -> Response:
    """Any other exception: a fault of ours, a 500 that says no more."""
    return error_response(request.url.path, internal_error())
