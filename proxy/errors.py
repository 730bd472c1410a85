"""OpenAI-shaped errors: `{"error": {"message", "type", "code", "param"}}`.

Every failure the proxy reports goes through `ProxyError`, so clients see the
same shape whether the fault is theirs, ours, or the provider's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

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

# Things that look like credentials, wherever they appear in a provider's message.
_SECRET_PATTERNS = [
    re.compile(r"\b(sk|pk|rk|ak)-[A-Za-z0-9_\-]{6,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]{6,}"),
    re.compile(r"(?i)(api[_-]?key|token|secret|password)(['\"]?\s*[:=]\s*['\"]?)[^\s'\",}]{4,}"),
]


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
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.code = code
        self.param = param
        self.error_type = error_type or _TYPES.get(status_code, "api_error")

    def body(self) -> dict[str, dict[str, str | None]]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "code": self.code,
                "param": self.param,
            }
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status_code)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Remove configured secrets and anything credential-shaped from `text`."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    text = _SECRET_PATTERNS[0].sub(lambda m: m.group(1) + "-***", text)
    text = _SECRET_PATTERNS[1].sub("Bearer ***", text)
    return _SECRET_PATTERNS[2].sub(lambda m: m.group(1) + m.group(2) + "***", text)
