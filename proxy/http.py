"""HTTP helpers every route shares: a bounded body read, JSON in and out, the caller."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse

from proxy.auth import Principal
from proxy.errors import ProxyError

__all__ = ["ORJSONResponse", "parse_json", "principal", "read_body"]


class ORJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body; 413 as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
    return b"".join(chunks)


def parse_json(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or an OpenAI-shaped 400."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ProxyError(400, "Request body is not valid JSON.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ProxyError(400, "Request body must be a JSON object.", code="invalid_json")
    return data


def _too_large(limit: int) -> ProxyError:
    return ProxyError(
        413, f"Request body exceeds the limit of {limit} bytes.", code="request_too_large"
    )


def principal(request: Request) -> Principal:
    """The caller `AuthMiddleware` authenticated."""
    found = request.scope.get("state", {}).get("principal")
    if not isinstance(found, Principal):  # every route is behind the middleware
        raise ProxyError(401, "Not authenticated.", code="invalid_api_key")
    return found
