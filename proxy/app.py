"""The Starlette application: routes, request validation and error mapping."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from proxy import headers
from proxy.auth import Auth, AuthMiddleware, Principal
from proxy.config import Settings, load_settings
from proxy.engine import Engine
from proxy.errors import ProxyError
from proxy.history import pause
from proxy.http import (
    ClientDisconnected,
    ORJSONResponse,
    parse_json,
    principal,
    read_body,
    unless_disconnected,
)
from proxy.metrics import OTHER_MODEL, exposition
from proxy.openai_compatible import Events
from proxy.redaction import Redactor
from proxy.replies import StreamedReply, reply_message
from proxy.session_api import SessionApi, model_not_allowed
from proxy.sessions import Mode, SessionStore
from proxy.stores import open_store, tenant_secret
from proxy.telemetry import RequestTelemetry
from proxy.turns import RequestContext, Turn
from proxy.upstream import Upstream
from proxy.validation import session_id, validate_parameters

# nginx's status for a client that went away before the response was complete.
CLIENT_CLOSED_REQUEST = 499


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
        self.engine = Engine(settings, upstream, store)

    def _request_context(self, request: Request, caller: Principal, body: bytes) -> RequestContext:
        header = self.settings.session.header
        name = request.headers.get(header)
        return RequestContext(
            tenant=caller.tenant,
            session_id=session_id(name, header) if name else None,
            mode=_mode(request.headers.get(headers.SESSION_MODE)),
            budget_ratio=_ratio(request.headers.get(headers.BUDGET_RATIO)),
            provider_key=caller.provider_key,
            secrets=caller.presented,
            body=body,
        )

    async def chat_completions(self, request: Request) -> Response:
        telemetry = RequestTelemetry(model=OTHER_MODEL)
        try:
            response = await self._chat(request, telemetry)
        except ClientDisconnected:  # nobody to answer; the upstream call was cancelled
            telemetry.finish(CLIENT_CLOSED_REQUEST)
            return Response(status_code=CLIENT_CLOSED_REQUEST)
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
        caller = principal(request)
        if not caller.may_use(body["model"]):
            raise model_not_allowed(body["model"])
        self.upstream.check_model(body["model"])
        context = self._request_context(request, caller, raw)
        turn = await unless_disconnected(request, self.engine.prepare(body, context))
        try:
            telemetry.turn = turn
            response_headers = {headers.REQUEST_ID: telemetry.request_id}
            response_headers |= turn.response_headers()
            telemetry.upstream_started()
            if body.get("stream"):
                opening = self.upstream.stream(turn.body, turn.messages_json, context.provider_key)
                events = await unless_disconnected(request, opening)
                telemetry.stream = True
                return TurnStream(
                    self._sse(turn, events, telemetry, caller),
                    finish=lambda: self.engine.finish(turn),
                    media_type="text/event-stream",
                    headers=response_headers | {"Cache-Control": "no-cache"},
                )
            completion = await unless_disconnected(
                request, self.upstream.complete(turn.body, turn.messages_json, context.provider_key)
            )
            telemetry.upstream_finished()
            telemetry.usage = completion.data.get("usage")
            self.engine.observe_usage(turn, telemetry.usage)
            await self.engine.commit(turn, reply_message(completion.data))
        except BaseException:
            await self.engine.finish(turn)
            raise
        await self.engine.finish(turn)
        if completion.raw is not None:  # the provider's own bytes, relayed as they came
            return Response(completion.raw, media_type="application/json", headers=response_headers)
        return ORJSONResponse(completion.data, headers=response_headers)

    async def _sse(
        self,
        turn: Turn,
        events: AsyncIterator[Events],
        telemetry: RequestTelemetry,
        caller: Principal,
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
            error = exc.redacted(lambda text: self.upstream.redact(text, caller.presented))
            yield b"data: " + orjson.dumps(error.body()) + b"\n\n"
            return
        finally:
            telemetry.finish(status)
        yield b"data: [DONE]\n\n"

    async def metrics(self, request: Request) -> Response:
        body, content_type = exposition()
        return Response(body, media_type=content_type)

    async def models(self, request: Request) -> Response:
        caller = principal(request)
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "context-proxy"}
            for name in self.upstream.model_names()
            if caller.may_use(name)
        ]
        return ORJSONResponse({"object": "list", "data": data})

    async def live(self, request: Request) -> Response:
        return ORJSONResponse({"status": "ok"})

    async def ready(self, request: Request) -> Response:
        try:
            await self.store.ping()
        except ProxyError as exc:
            return ORJSONResponse({"status": "unavailable", "store": exc.message}, 503)
        return ORJSONResponse({"status": "ok", "models": len(self.upstream.model_names())})


class TurnStream(StreamingResponse):
    """A streamed reply that ends its turn (`finish`) however the stream ends: done,
    failed, or cut off by the client before or after it began."""

    def __init__(
        self, content: AsyncIterator[bytes], finish: Callable[[], Awaitable[None]], **kwargs: Any
    ) -> None:
        super().__init__(content, **kwargs)
        self._finish = finish

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._finish()


def _has_output(chunk: dict[str, Any]) -> bool:
    deltas = [choice.get("delta") or {} for choice in chunk.get("choices") or []]
    return any(delta.get("content") or delta.get("tool_calls") for delta in deltas)


def _error_handler(redact: Redactor) -> Callable[[Request, Exception], Awaitable[Response]]:
    async def proxy_error(request: Request, exc: Exception) -> Response:
        """Every error body leaves through here (or `_sse`), scrubbed of every credential
        known and of what the caller presented."""
        assert isinstance(exc, ProxyError)
        caller = request.scope.get("state", {}).get("principal")
        own = caller.presented if isinstance(caller, Principal) else ()
        return exc.redacted(lambda text: redact(text, own)).response()

    return proxy_error


async def _too_deep(request: Request, exc: Exception) -> Response:
    """orjson writes at most 255 levels of nesting (it reads 1,024): a request whose JSON
    nests deeper cannot be hashed, stored or sent on. orjson says so with a TypeError
    (its JSONEncodeError); any other TypeError is a fault of ours, a 500."""
    if isinstance(exc, TypeError) and str(exc) != "Recursion limit reached":
        raise exc
    return ProxyError(
        400, "The request's JSON is nested too deeply (at most 255 levels).", code="invalid_json"
    ).response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return ProxyError(exc.status_code, str(exc.detail), code=str(exc.status_code)).response()


async def _unexpected_error(request: Request, exc: Exception) -> Response:
    return ProxyError(500, "Internal error in context-proxy.", code="internal_error").response()


def create_app(settings: Settings | None = None) -> Starlette:
    settings = settings if settings is not None else load_settings()
    store = open_store(settings.session)
    upstream = Upstream(settings)
    proxy = Proxy(settings, upstream, store)
    sessions = SessionApi(proxy.engine, upstream, store, settings.server.max_body_bytes)
    auth = Auth(settings.auth, tenant_secret(settings.session))

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

    app = Starlette(
        lifespan=lifespan,
        routes=[
            Route("/v1/chat/completions", proxy.chat_completions, methods=["POST"]),
            Route("/chat/completions", proxy.chat_completions, methods=["POST"]),
            Route("/v1/models", proxy.models, methods=["GET"]),
            Route("/health/live", proxy.live, methods=["GET"]),
            Route("/health/ready", proxy.ready, methods=["GET"]),
            Route("/metrics", proxy.metrics, methods=["GET"]),
            Route("/v1/sessions", sessions.list, methods=["GET"]),
            Route("/v1/sessions/{session_id}", sessions.get, methods=["GET"]),
            Route("/v1/sessions/{session_id}", sessions.delete, methods=["DELETE"]),
            Route("/v1/sessions/{session_id}/preview", sessions.preview, methods=["POST"]),
        ],
        middleware=[Middleware(AuthMiddleware, auth=auth)],
        exception_handlers={
            ProxyError: _error_handler(upstream.redact),
            HTTPException: _http_error,
            orjson.JSONEncodeError: _too_deep,  # TypeError itself
            RecursionError: _too_deep,
            Exception: _unexpected_error,
        },
    )
    # An API answers a path it does not serve with a 404, never a redirect (a client
    # following one would resend its body elsewhere).
    app.router.redirect_slashes = False
    return app
