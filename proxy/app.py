"""The Starlette application: routes, request validation and error mapping."""

from __future__ import annotations

import contextlib
import gc
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
from proxy.engine import Engine
from proxy.errors import ProxyError
from proxy.history import pause
from proxy.metrics import OTHER_MODEL, exposition
from proxy.openai_compatible import Events
from proxy.replies import StreamedReply, reply_message
from proxy.sessions import Checkpoint, Mode, SessionMeta, SessionStore, StoredMessage
from proxy.stores import open_store, tenant_secret
from proxy.telemetry import RequestTelemetry
from proxy.turns import RequestContext, Turn
from proxy.upstream import Upstream
from proxy.validation import invalid, validate_parameters

# nginx's status for a client that went away before the response was complete.
CLIENT_CLOSED_REQUEST = 499


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


class Proxy:
    """Route handlers, holding what they share: settings, upstream, the engine."""

    def __init__(self, settings: Settings, upstream: Upstream, store: SessionStore) -> None:
        self.settings = settings
        self.upstream = upstream
        self.store = store
        self.engine = Engine(settings, upstream, store, tenant_secret(settings.session))

    def _request_context(self, request: Request, body: bytes = b"") -> RequestContext:
        return RequestContext(
            authorization=request.headers.get("authorization"),
            session_id=request.headers.get(self.settings.session.header) or None,
            mode=_mode(request.headers.get(headers.SESSION_MODE)),
            budget_ratio=_ratio(request.headers.get(headers.BUDGET_RATIO)),
            body=body,
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
        raw = await read_body(request, self.settings.server.max_body_bytes)
        body = parse_json(raw)
        await pause(len(raw))
        validate_parameters(body)
        telemetry.model = self.engine.label(body["model"])
        self.upstream.check_model(body["model"])
        turn = await self.engine.prepare(body, self._request_context(request, raw))
        telemetry.turn = turn
        response_headers = {headers.REQUEST_ID: telemetry.request_id}
        response_headers |= turn.response_headers()
        telemetry.upstream_started()
        if body.get("stream"):
            events = await self.upstream.stream(turn.body, turn.messages_json)
            telemetry.stream = True
            return StreamingResponse(
                self._sse(turn, events, telemetry),
                media_type="text/event-stream",
                headers=response_headers | {"Cache-Control": "no-cache"},
            )
        completion = await self.upstream.complete(turn.body, turn.messages_json)
        telemetry.upstream_finished()
        telemetry.usage = completion.data.get("usage")
        self.engine.observe_usage(turn, telemetry.usage)
        await self.engine.commit(turn, reply_message(completion.data))
        if completion.raw is not None:  # the provider's own bytes, relayed as they came
            return Response(completion.raw, media_type="application/json", headers=response_headers)
        return ORJSONResponse(completion.data, headers=response_headers)

    async def _sse(
        self,
        turn: Turn,
        events: AsyncIterator[Events],
        telemetry: RequestTelemetry,
    ) -> AsyncIterator[bytes]:
        """OpenAI's SSE framing. The reply is stored only once the stream is complete;
        a failure mid-stream becomes an error event and no [DONE], so the client can
        tell a cut-off reply from a finished one. A client that disconnects cancels
        this generator, and with it the upstream call."""
        reply = StreamedReply()
        status = CLIENT_CLOSED_REQUEST
        try:
            async for batch in events:
                for chunk in batch.chunks:
                    reply.add(chunk)
                    if chunk.get("usage"):
                        telemetry.usage = chunk["usage"]
                    elif _has_output(chunk):
                        telemetry.first_token()
                yield batch.raw or b"".join(
                    b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in batch.chunks
                )
            telemetry.upstream_finished()
            self.engine.observe_usage(turn, telemetry.usage)
            await self.engine.commit(turn, reply.message())
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
        tenant, session_id, meta = await self._session(request)
        messages = await self.store.messages(tenant, session_id, 0, meta.length)
        checkpoints = await self.store.checkpoints(tenant, session_id)
        return ORJSONResponse(session_view(meta, messages, checkpoints))

    async def delete_session(self, request: Request) -> Response:
        tenant = self.engine.tenant(request.headers.get("authorization"))
        session_id = request.path_params["session_id"]
        if not await self.store.delete(tenant, session_id):
            raise _no_session(session_id)
        return ORJSONResponse({"id": session_id, "object": "session.deleted", "deleted": True})

    async def preview(self, request: Request) -> Response:
        """The exact context the next request would send, without calling any model."""
        body = parse_json(await read_body(request, self.settings.server.max_body_bytes))
        _, session_id, _ = await self._session(request)
        body.setdefault("messages", [])
        if not isinstance(body.get("model"), str) or not body["model"]:
            raise invalid("model", "`model` is required and must be a non-empty string.")
        if body["messages"]:
            validate_parameters(body)
        self.upstream.check_model(body["model"])
        context = replace(self._request_context(request), session_id=session_id)
        return ORJSONResponse(await self.engine.preview(body, context))

    async def _session(self, request: Request) -> tuple[str, str, SessionMeta]:
        tenant = self.engine.tenant(request.headers.get("authorization"))
        session_id = request.path_params["session_id"]
        meta = await self.store.load(tenant, session_id)
        if meta is None:
            raise _no_session(session_id)
        return tenant, session_id, meta

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


def session_view(
    meta: SessionMeta, messages: list[StoredMessage], checkpoints: list[Checkpoint]
) -> dict[str, Any]:
    """A session as the API shows it: the whole transcript, checkpoints, token stats."""
    tokens: dict[str, int] = {}
    for stored in messages:
        for name, count in stored.tokens.items():
            tokens[name] = tokens.get(name, 0) + count
    return {
        "id": meta.session_id,
        "object": "session",
        "created": meta.created,
        "updated": meta.updated,
        "version": meta.version,
        "messages": [stored.message for stored in messages],
        "checkpoints": [
            {
                "covers_until": c.covers_until,
                "text": c.text,
                "tokens": c.tokens,
                "model": c.model,
                "created": c.created,
            }
            for c in checkpoints
        ],
        "stats": {"messages": len(messages), "tokens": tokens},
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
        proxy.engine.warm_up()
        # LiteLLM's model map and its other module data are a few hundred thousand
        # objects that live as long as the process: kept out of the garbage collector's
        # full passes, which would otherwise walk them all every few large requests.
        gc.freeze()
        # Parsing a long conversation allocates tens of thousands of containers, almost
        # none of them in cycles (reference counting frees them): collecting every 100k
        # allocations rather than every 700 saves ~1.5 ms of a 5,000-message request.
        gc.set_threshold(100_000, 50, 100)
        yield
        await proxy.engine.close()
        await proxy.upstream.close()
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
