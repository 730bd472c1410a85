"""OpenAI-shaped errors: `{"error": {"message", "type", "code", "param"}}`.

Every failure the proxy reports goes through `ProxyError`, so clients see the
same shape whether the fault is theirs, ours, or the provider's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from starlette.responses import JSONResponse

from proxy.config import SECRET_REF, Settings

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

    def redacted(self, secrets: Iterable[str]) -> ProxyError:
        """This error with `secrets` (and anything credential-shaped) out of its message."""
        message = redact(self.message, secrets)
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


# Names of settings and environment variables that hold credentials (LiteLLM reads
# OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, HF_TOKEN, VERTEXAI_CREDENTIALS, WATSONX_APIKEY, …).
_SECRET_NAME = re.compile(r"(?i)key|token|secret|password|credential")
_SHORTEST_SECRET = 8  # shorter values ("true", "us-east-1") would redact ordinary words


def configured_secrets(settings: Settings, environ: Mapping[str, str] = os.environ) -> list[str]:
    """Every credential the process knows of, whatever its shape: provider keys in the
    config (references resolved), the environment's keys, tokens and secrets, the
    tenant secret and the Redis password. Error texts are scrubbed of all of them."""
    found = [
        value
        for name, value in environ.items()
        if _SECRET_NAME.search(name) and len(value) >= _SHORTEST_SECRET
    ]
    for entry in settings.model_list:
        for name, value in entry.litellm_params.items():
            if isinstance(value, str) and _SECRET_NAME.search(name):
                if value.startswith(SECRET_REF):
                    value = environ.get(value[len(SECRET_REF) :], "")
                found.append(value)
    found.append(settings.session.tenant_secret or "")
    found.append(urlsplit(settings.session.redis_url).password or "")
    # Longest first, so a secret that contains another is removed whole.
    return sorted({value for value in found if len(value) >= 4}, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Remove configured secrets and anything credential-shaped from `text`."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    text = _SECRET_PATTERNS[0].sub(lambda m: m.group(1) + "-***", text)
    text = _SECRET_PATTERNS[1].sub("Bearer ***", text)
    return _SECRET_PATTERNS[2].sub(lambda m: m.group(1) + m.group(2) + "***", text)
