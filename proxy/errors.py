"""OpenAI-shaped errors: `{"error": {"message", "type", "code", "param"}}`.

Every failure the proxy reports goes through `ProxyError`, so clients see the
same shape whether the fault is theirs, ours, or the provider's.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.responses import JSONResponse

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


class ProxyError(Exception):
    """An error with the HTTP status and OpenAI error fields it should produce."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        error_type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.code = code
        self.param = param
        self.error_type = error_type or _TYPES.get(status_code, "api_error")
        self.headers = headers

    def body(self) -> dict[str, dict[str, str | None]]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "code": self.code,
                "param": self.param,
            }
        }

    def redacted(self, redact: Callable[[str], str]) -> ProxyError:
        """This error with its message passed through `redact`."""
        message = redact(self.message)
        if message == self.message:
            return self
        return ProxyError(
            self.status_code,
            message,
            code=self.code,
            param=self.param,
            error_type=self.error_type,
            headers=self.headers,
        )

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status_code, headers=self.headers)


def previous_response_not_found() -> ProxyError:
    """A `previous_response_id` that names nothing this caller may continue: not theirs,
    never stored (its turn failed), or its session deleted."""
    return ProxyError(
        404,
        "The previous response was not found.",
        code="previous_response_not_found",
        param="previous_response_id",
    )
