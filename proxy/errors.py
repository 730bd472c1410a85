"""What can go wrong, as types: the failures a caller is told about, in the proxy's own
words (`message`) with the OpenAI error fields `code` and `param`.

These are domain errors: they say what happened (the request is invalid, the session
moved on, the store is down, the provider failed), never how to answer it. The one
table that turns each into an HTTP status and an error body is `proxy.http.errors`,
at the HTTP boundary; nothing below it knows a status code. A provider's own status is
a fact about the provider, carried by `UpstreamFailure` as it came.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Self

__all__ = [
    "ContextOverflow",
    "InternalError",
    "InvalidRequest",
    "NotFound",
    "PermissionDenied",
    "ProxyError",
    "RateLimited",
    "RequestTimeout",
    "RequestTooLarge",
    "SessionConflict",
    "StoreUnavailable",
    "Unauthenticated",
    "UnsupportedMediaType",
    "UpstreamFailure",
    "UpstreamTimeout",
    "previous_response_not_found",
]


class ProxyError(Exception):
    """A failure the caller is told about. `retry_after` (seconds, as the header says
    them) is set where waiting is the remedy."""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        retry_after: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param
        self.retry_after = retry_after

    def redacted(self, redact: Callable[[str], str]) -> Self:
        """This error with its message passed through `redact`."""
        message = redact(self.message)
        if message == self.message:
            return self
        clone = copy.copy(self)
        clone.message = message
        clone.args = (message,)
        return clone


class InvalidRequest(ProxyError):
    """The request is not one the proxy or any provider should take."""


class ContextOverflow(InvalidRequest):
    """The request cannot fit the model's context: what cannot be cut (system messages,
    tools, the last turn's images) exceeds the budget, or the output asked for leaves no
    room for input."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message, code="context_length_exceeded", param=param)


class RequestTooLarge(InvalidRequest):
    """The request body is larger than `server.max_body_bytes`."""


class UnsupportedMediaType(InvalidRequest):
    """The request body is not sent as JSON (`proxy.http.browser`)."""


class RequestTimeout(ProxyError):
    """The request body did not arrive in time."""


class Unauthenticated(ProxyError):
    """No credential, or one the proxy does not know."""


class PermissionDenied(ProxyError):
    """A known caller asks for what its key may not do."""


class NotFound(ProxyError):
    """What the request names does not exist, or is not the caller's to see."""


class SessionConflict(ProxyError):
    """The session moved on under the request (a concurrent turn, a lapsed turn lock, a
    response that is no longer the latest): resend with the current history."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "conflict",
        param: str | None = None,
        retry_after: str | None = None,
    ) -> None:
        super().__init__(message, code=code, param=param, retry_after=retry_after)


class RateLimited(ProxyError):
    """The caller's key is over its request rate."""


class StoreUnavailable(ProxyError):
    """The session store cannot take or give what the turn needs right now."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="store_unavailable", retry_after="1")


class UpstreamFailure(ProxyError):
    """The provider failed the call: answered an error (`provider_status`, its own HTTP
    status), could not be reached, or sent what is not a valid reply (no status)."""

    def __init__(
        self,
        message: str,
        *,
        provider_status: int | None = None,
        code: str | None = None,
        retry_after: str | None = None,
    ) -> None:
        super().__init__(message, code=code, retry_after=retry_after)
        self.provider_status = provider_status


class UpstreamTimeout(UpstreamFailure):
    """The provider gave no answer within the request's deadline."""


class InternalError(ProxyError):
    """A fault of the proxy's own."""


def previous_response_not_found() -> NotFound:
    """A `previous_response_id` that names nothing this caller may continue: not theirs,
    never stored (its turn failed), or its session deleted."""
    return NotFound(
        "The previous response was not found.",
        code="previous_response_not_found",
        param="previous_response_id",
    )
