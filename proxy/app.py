"""The Starlette application: routes, request validation and error mapping."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from proxy import headers
from proxy.config import Settings, load_settings
from proxy.conversations import Conversations, Prepared, RequestContext
from proxy.errors import ProxyError
from proxy.metrics import OTHER_MODEL, exposition
from proxy.replies import StreamedReply, reply_message
from proxy.sessions import Mode, Session, SessionStore
from proxy.stores import open_store, tenant_secret
from proxy.telemetry import RequestTelemetry
from proxy.upstream import CHAT_PARAMETERS, Upstream

# nginx's status for a client that went away before the response was complete.
CLIENT_CLOSED_REQUEST = 499
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


def _ratio(value: str | None) -> float | None:
    """The `X-Context-Budget-Ratio` override, validated."""
    if value is None:
        return None
    try:
        ratio = float(value)
    except ValueError:
        ratio = -1.0
    if not 0.1 <= ratio <= 0.95:
        raise ProxyError(
            400,
            f"{headers.BUDGET_RATIO} must be a number from 0.1 to 0.95.",
            code="invalid_header",
            param=headers.BUDGET_RATIO,
        )
    return ratio


def _mode(value: str | None) -> Mode:
    """The `X-Session-Mode` override, validated."""
    if value is None or value == "":
        return "auto"
    if value.lower() not in ("append", "full", "auto"):
        raise ProxyError(
            400,
            f"{headers.SESSION_MODE} must be `append` or `full`.",
            code="invalid_header",
            param=headers.SESSION_MODE,
        )
    return value.lower()  # type: ignore[return-value]


def _invalid(param: str, message: str) -> ProxyError:
    return ProxyError(400, message, code="invalid_value", param=param)


class Proxy:
    """Route handlers, holding what they share: settings, upstream, conversations."""

    def __init__(self, settings: Settings, upstream: Upstream, store: SessionStore) -> None:
        self.settings = settings
        self.upstream = upstream
        self.store = store
        secret = tenant_secret(settings.session)
        self.conversations = Conversations(settings, upstream, store, secret)

    def _request_context(self, request: Request) -> RequestContext:
        return RequestContext(
            authorization=request.headers.get("authorization"),
            session_id=request.headers.get(self.settings.session.header) or None,
            mode=_mode(request.headers.get(headers.SESSION_MODE)),
            budget_ratio=_ratio(request.headers.get(headers.BUDGET_RATIO)),
        )

    async def chat_completions(self, request: Request) -> Response:
        telemetry = RequestTelemetry(model=OTHER_MODEL)
        try:
            response = await self._chat(request, telemetry)
        except ProxyError as exc:
            telemetry.finish(exc.status_code)
            raise
        except BaseException:
            telemetry.finish(500)
            raise
        if not telemetry.stream:
            telemetry.finish(response.status_code)
        return response

    async def _chat(self, request: Request, telemetry: RequestTelemetry) -> Response:
        body = await read_json(request, self.settings.server.max_body_bytes)
        validate_chat(body)
        telemetry.model = self.conversations.label(body["model"])
        self.upstream.check_model(body["model"])
        prepared = await self.conversations.prepare(body, self._request_context(request))
        telemetry.prepared = prepared
        telemetry.input_limit = prepared.input_limit
        response_headers = {headers.REQUEST_ID: telemetry.request_id}
        response_headers |= prepared.response_headers()
        telemetry.upstream_started()
        if body.get("stream"):
            chunks = await self.upstream.stream(prepared.body)
            telemetry.stream = True
            return StreamingResponse(
                self._sse(prepared, chunks, telemetry),
                media_type="text/event-stream",
                headers=response_headers | {"Cache-Control": "no-cache"},
            )
        completion = await self.upstream.complete(prepared.body)
        telemetry.upstream_finished()
        telemetry.usage = completion.get("usage")
        self.conversations.observe_usage(prepared, telemetry.usage)
        await self.conversations.record(prepared, reply_message(completion))
        return ORJSONResponse(completion, headers=response_headers)

    async def _sse(
        self,
        prepared: Prepared,
        chunks: AsyncIterator[dict[str, Any]],
        telemetry: RequestTelemetry,
    ) -> AsyncIterator[bytes]:
        """OpenAI's SSE framing. The reply is stored only once the stream is complete;
        a failure mid-stream becomes an error event and no [DONE], so the client can
        tell a cut-off reply from a finished one. A client that disconnects cancels
        this generator, and with it the upstream call."""
        reply = StreamedReply()
        status = CLIENT_CLOSED_REQUEST
        try:
            async for chunk in chunks:
                reply.add(chunk)
                if chunk.get("usage"):
                    telemetry.usage = chunk["usage"]
                elif _has_output(chunk):
                    telemetry.first_token()
                yield b"data: " + orjson.dumps(chunk) + b"\n\n"
            telemetry.upstream_finished()
            self.conversations.observe_usage(prepared, telemetry.usage)
            await self.conversations.record(prepared, reply.message())
            status = 200
        except ProxyError as exc:
            status = exc.status_code
            yield b"data: " + orjson.dumps(exc.body()) + b"\n\n"
            return
        finally:
            telemetry.finish(status)
        yield b"data: [DONE]\n\n"

    async def metrics(self, request: Request) -> Response:
        body, content_type = exposition()
        return Response(body, media_type=content_type)

    async def get_session(self, request: Request) -> Response:
        session = await self._session(request)
        return ORJSONResponse(session_view(session))

    async def delete_session(self, request: Request) -> Response:
        tenant = self.conversations.tenant(request.headers.get("authorization"))
        session_id = request.path_params["session_id"]
        if not await self.store.delete(tenant, session_id):
            raise _no_session(session_id)
        return ORJSONResponse({"id": session_id, "object": "session.deleted", "deleted": True})

    async def preview(self, request: Request) -> Response:
        """The exact context the next request would send, without calling any model."""
        body = await read_json(request, self.settings.server.max_body_bytes)
        session = await self._session(request)
        body.setdefault("messages", [])
        if not isinstance(body.get("model"), str) or not body["model"]:
            raise _invalid("model", "`model` is required and must be a non-empty string.")
        if body["messages"]:
            validate_chat(body)
        self.upstream.check_model(body["model"])
        context = replace(self._request_context(request), session_id=session.session_id)
        preview = await self.conversations.preview(body, context)
        return ORJSONResponse(preview)

    async def _session(self, request: Request) -> Session:
        tenant = self.conversations.tenant(request.headers.get("authorization"))
        session_id = request.path_params["session_id"]
        session = await self.store.get(tenant, session_id)
        if session is None:
            raise _no_session(session_id)
        return session

    async def models(self, request: Request) -> Response:
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "context-proxy"}
            for name in self.upstream.model_names()
        ]
        return ORJSONResponse({"object": "list", "data": data})

    async def live(self, request: Request) -> Response:
        return ORJSONResponse({"status": "ok"})

    async def ready(self, request: Request) -> Response:
        if not await self.store.ping():
            return ORJSONResponse({"status": "unavailable", "store": "unreachable"}, 503)
        return ORJSONResponse({"status": "ok", "models": len(self.upstream.model_names())})


def _has_output(chunk: dict[str, Any]) -> bool:
    deltas = [choice.get("delta") or {} for choice in chunk.get("choices") or []]
    return any(delta.get("content") or delta.get("tool_calls") for delta in deltas)


def session_view(session: Session) -> dict[str, Any]:
    """A session as the API shows it: the whole transcript, checkpoints, token stats."""
    tokens: dict[str, int] = {}
    for stored in session.transcript:
        for name, count in stored.tokens.items():
            tokens[name] = tokens.get(name, 0) + count
    return {
        "id": session.session_id,
        "object": "session",
        "created": session.created,
        "updated": session.updated,
        "version": session.version,
        "messages": [stored.message for stored in session.transcript],
        "checkpoints": [
            {
                "covers_until": c.covers_until,
                "text": c.text,
                "tokens": c.tokens,
                "model": c.model,
                "created": c.created,
            }
            for c in session.checkpoints
        ],
        "stats": {"messages": len(session.transcript), "tokens": tokens},
    }


def _no_session(session_id: str) -> ProxyError:
    return ProxyError(404, f"No session `{session_id}`.", code="session_not_found")


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
    store = open_store(settings.session)
    proxy = Proxy(settings, Upstream(settings), store)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await proxy.conversations.close()
        await store.close()

    return Starlette(
        lifespan=lifespan,
        routes=[
            Route("/v1/chat/completions", proxy.chat_completions, methods=["POST"]),
            Route("/chat/completions", proxy.chat_completions, methods=["POST"]),
            Route("/v1/models", proxy.models, methods=["GET"]),
            Route("/health/live", proxy.live, methods=["GET"]),
            Route("/health/ready", proxy.ready, methods=["GET"]),
            Route("/metrics", proxy.metrics, methods=["GET"]),
            Route("/v1/sessions/{session_id}", proxy.get_session, methods=["GET"]),
            Route("/v1/sessions/{session_id}", proxy.delete_session, methods=["DELETE"]),
            Route("/v1/sessions/{session_id}/preview", proxy.preview, methods=["POST"]),
        ],
        exception_handlers={
            ProxyError: _proxy_error,
            HTTPException: _http_error,
            Exception: _unexpected_error,
        },
    )
