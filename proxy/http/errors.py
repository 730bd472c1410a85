"""The one table where a domain error (`proxy.errors`) becomes HTTP: its status, its
OpenAI error type, its headers, and the body in the shape of the door it was meant for
(Anthropic's on the Messages API, the login page on the viewer's, OpenAI's elsewhere).
Nothing below this layer knows a status code.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import JSONResponse, Response

from proxy import errors
from proxy.doors.anthropic.door import anthropic_error
from proxy.doors.base import ErrorReply
from proxy.http import viewer

__all__ = ["OPENAI_TYPES", "STATUS", "error_reply", "error_response", "reply_response"]

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
