"""The Starlette application: routes, request validation and error mapping."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from proxy import headers
from proxy.config import Settings, load_settings
from proxy.errors import ProxyError
from proxy.upstream import CHAT_PARAMETERS, Upstream

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_NUMBERS = ("temperature", "top_p", "presence_penalty", "frequency_penalty")
_INTEGERS = ("n", "max_tokens", "max_completion_tokens", "seed", "top_logprobs")


class ORJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The request body as a JSON object; 413 as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _too_large(limit)
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


def validate_chat(body: dict[str, Any]) -> None:
    """Reject what no provider should see: unknown or internal parameters, wrong types."""
    for key in body:
        if key not in CHAT_PARAMETERS:
            raise ProxyError(
                400,
                f"Unrecognized request argument supplied: {key}",
                code="unknown_parameter",
                param=key,
            )
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise _invalid("model", "`model` is required and must be a non-empty string.")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _invalid("messages", "`messages` is required and must be a non-empty array.")
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise _invalid(where, f"`{where}` must be an object.")
        if message.get("role") not in ROLES:
            raise _invalid(f"{where}.role", f"`{where}.role` must be one of {sorted(ROLES)}.")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _invalid(f"{where}.content", f"`{where}.content` must be a string or array.")
    for key in _NUMBERS:
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise _invalid(key, f"`{key}` must be a number.")
    for key in _INTEGERS:
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise _invalid(key, f"`{key}` must be an integer.")
    for key, kind, name in (
        ("stream", bool, "a boolean"),
        ("tools", list, "an array"),
        ("stream_options", dict, "an object"),
        ("response_format", dict, "an object"),
    ):
        if body.get(key) is not None and not isinstance(body[key], kind):
            raise _invalid(key, f"`{key}` must be {name}.")


def _invalid(param: str, message: str) -> ProxyError:
    return ProxyError(400, message, code="invalid_value", param=param)


class Proxy:
    """Route handlers, holding the settings and the upstream they share."""

    def __init__(self, settings: Settings, upstream: Upstream) -> None:
        self.settings = settings
        self.upstream = upstream

    async def chat_completions(self, request: Request) -> Response:
        body = await read_json(request, self.settings.server.max_body_bytes)
        validate_chat(body)
        self.upstream.check_model(body["model"])
        response_headers = {headers.REQUEST_ID: uuid.uuid4().hex}
        if body.get("stream"):
            chunks = await self.upstream.stream(body)
            return StreamingResponse(
                _sse(chunks),
                media_type="text/event-stream",
                headers=response_headers | {"Cache-Control": "no-cache"},
            )
        completion = await self.upstream.complete(body)
        return ORJSONResponse(completion, headers=response_headers)

    async def models(self, request: Request) -> Response:
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "context-proxy"}
            for name in self.upstream.model_names()
        ]
        return ORJSONResponse({"object": "list", "data": data})

    async def live(self, request: Request) -> Response:
        return ORJSONResponse({"status": "ok"})

    async def ready(self, request: Request) -> Response:
        return ORJSONResponse({"status": "ok", "models": len(self.upstream.model_names())})


async def _sse(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """OpenAI's SSE framing. A failure mid-stream becomes an error event and no [DONE],
    so the client can tell a cut-off reply from a finished one."""
    try:
        async for chunk in chunks:
            yield b"data: " + orjson.dumps(chunk) + b"\n\n"
    except ProxyError as exc:
        yield b"data: " + orjson.dumps(exc.body()) + b"\n\n"
        return
    yield b"data: [DONE]\n\n"


async def _proxy_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProxyError)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return ProxyError(exc.status_code, str(exc.detail), code=str(exc.status_code)).response()


async def _unexpected_error(request: Request, exc: Exception) -> Response:
    return ProxyError(500, "Internal error in context-proxy.", code="internal_error").response()


def create_app(settings: Settings | None = None) -> Starlette:
    settings = settings if settings is not None else load_settings()
    proxy = Proxy(settings, Upstream(settings))
    return Starlette(
        routes=[
            Route("/v1/chat/completions", proxy.chat_completions, methods=["POST"]),
            Route("/chat/completions", proxy.chat_completions, methods=["POST"]),
            Route("/v1/models", proxy.models, methods=["GET"]),
            Route("/health/live", proxy.live, methods=["GET"]),
            Route("/health/ready", proxy.ready, methods=["GET"]),
        ],
        exception_handlers={
            ProxyError: _proxy_error,
            HTTPException: _http_error,
            Exception: _unexpected_error,
        },
    )
