"""The Starlette application: routes, request validation and error mapping."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from proxy.concurrency import Turns, pause, sized
from proxy.config.settings import Settings, load_settings
from proxy.conversation.validation import header_session_id
from proxy.doors.anthropic.door import MessagesDoor
from proxy.doors.base import Api, Door, ErrorReply, Framer, Inbound, ORJSONResponse
from proxy.doors.chat.door import ChatDoor
from proxy.doors.parameters import field_label, not_sent
from proxy.doors.responses.compact import CompactDoor
from proxy.doors.responses.door import ResponseIds, ResponsesDoor
from proxy.engine import Engine, RequestContext, TurnEvents
from proxy.errors import InternalError, InvalidRequest, ProxyError
from proxy.http import browser, headers, heap, viewer
from proxy.http.auth import OPEN_PATHS, Auth, AuthMiddleware, Principal
from proxy.http.bodies import (
    ClientDisconnected,
    parse_json,
    principal,
    read_body,
    too_deep,
    unless_disconnected,
)
from proxy.http.errors import (
    OPENAI_TYPES,
    error_reply,
    error_response,
    reply_response,
    status_of,
)
from proxy.http.sessions import SessionApi, model_not_allowed
from proxy.http.telemetry import RequestTelemetry
from proxy.observability.metrics import DROPPED_FIELDS, OTHER_MODEL, exposition
from proxy.observability.redaction import Redactor
from proxy.sessions.records import Mode
from proxy.sessions.store import SessionStore
from proxy.sessions.stores import open_store, tenant_secret
from proxy.upstream.client import Upstream

# nginx's status for a client that went away before the response was complete.
CLIENT_CLOSED_REQUEST = 499

logger = logging.getLogger("context_proxy.doors")
# The dropped fields an `X-Context-Dropped` header names (more are counted, not named).
_NAMED = 16
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def _ratio(value: str | None) -> float | None:
    """The `X-Context-Budget-Ratio` override, validated."""
    if value is None:
        return None
    try:
        ratio = float(value)
    except ValueError:
        ratio = -1.0
    if not 0.1 <= ratio <= 0.95:
        raise InvalidRequest(
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
        raise InvalidRequest(
            f"{headers.SESSION_MODE} must be `append` or `full`.",
            code="invalid_header",
            param=headers.SESSION_MODE,
        )
    return value.lower()  # type: ignore[return-value]


class Proxy:
    """Route handlers, holding what they share: settings, upstream, the engine."""

    def __init__(
        self,
        *,
        settings: Settings,
        upstream: Upstream,
        store: SessionStore,
        secret: bytes,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self.store = store
        self.engine = Engine(
            settings=settings, upstream=upstream, store=store, clock=clock, secret=secret
        )
        self.messages = MessagesDoor(settings.session.id_fields)

    def _request_context(
        self, request: Request, caller: Principal, body: bytes, inbound: Inbound
    ) -> RequestContext:
        header = self.settings.session.header
        name = request.headers.get(header)
        named = header_session_id(name, header) if name else None
        if inbound.session_id is not None and (named is None or inbound.continues is not None):
            named = inbound.session_id
        return RequestContext(
            tenant=caller.tenant,
            session_id=named,
            mode="append"
            if inbound.continues is not None
            else _mode(request.headers.get(headers.SESSION_MODE)),
            budget_ratio=_ratio(request.headers.get(headers.BUDGET_RATIO)),
            provider_key=caller.provider_key,
            models=caller.models,
            secrets=caller.presented,
            body=body,
            continues=inbound.continues,
            memory_id=headers.memory_id(request.headers, self.settings.memory) if named else None,
        )

    def door(self, door: Door) -> Callable[[Request], Awaitable[Response]]:
        """The route handler of one API shape: every door runs the same turn."""

        async def handle(request: Request) -> Response:
            telemetry = RequestTelemetry(model=OTHER_MODEL, api=door.api)
            try:
                response = await self._turn(door, request, telemetry)
            except ClientDisconnected:  # nobody to answer; the upstream call was cancelled
                telemetry.finish(CLIENT_CLOSED_REQUEST)
                return Response(status_code=CLIENT_CLOSED_REQUEST)
            except ProxyError as exc:
                telemetry.finish(status_of(exc))
                raise
            except BaseException:
                telemetry.finish(500)
                raise
            if not telemetry.stream:
                telemetry.finish(response.status_code)
            return response

        return handle

    async def _turn(self, door: Door, request: Request, telemetry: RequestTelemetry) -> Response:
        """Translate the request, run the engine's one turn, translate the reply back."""
        raw = await read_body(request, self.settings.server)
        body = parse_json(raw)
        await pause(len(raw))
        caller = principal(request)
        inbound = await door.inbound(body, caller.tenant)
        model = inbound.body["model"]
        telemetry.model = self.engine.label(model)
        if not caller.may_use(model, self.upstream.models.served_as(model)):
            raise model_not_allowed(model)
        self.upstream.models.check(model)
        context = self._request_context(request, caller, raw, inbound)
        response_headers = {headers.REQUEST_ID: telemetry.request_id}
        native = inbound.native
        if native is not None and not self.upstream.native(model, native.api):
            native = None  # the chat translation, for any other provider
        sent = [name for name in door.unsent_headers if name in request.headers]
        refuse = self.settings.server.drop_params is False
        supports = self.upstream.models.supports
        dropped = not_sent(inbound, native, supports, refuse=refuse, unsent=sent)
        named = _said_dropped(door.api, model, dropped)
        if named:
            response_headers[headers.DROPPED] = ", ".join(named)
        refused = self.upstream.refused_fallbacks(model, caller.models)
        if refused:  # said on the answer, and on the error when no fallback was left
            response_headers[headers.FALLBACKS_REFUSED] = ", ".join(refused)
        try:
            if inbound.stream:
                events = await unless_disconnected(
                    request, self.engine.stream(inbound.body, context, telemetry, native)
                )
                try:
                    framer = door.framer(inbound, events.turn)
                except BaseException:
                    await events.aclose()
                    raise
                telemetry.stream = True
                return TurnStream(
                    self._sse(events, telemetry, caller, framer),
                    finish=events.aclose,
                    media_type="text/event-stream",
                    headers=response_headers
                    | headers.turn_headers(events.turn)
                    | {"Cache-Control": "no-cache"},
                )
            turn, completion = await unless_disconnected(
                request, self.engine.complete(inbound.body, context, telemetry, native)
            )
        except ProxyError:
            if refused:  # the error handler adds these to the error's own headers
                request.state.error_headers = {headers.FALLBACKS_REFUSED: ", ".join(refused)}
            raise
        return door.reply(completion, inbound, turn, response_headers | headers.turn_headers(turn))

    async def _sse(
        self,
        events: TurnEvents,
        telemetry: RequestTelemetry,
        caller: Principal,
        framer: Framer,
    ) -> AsyncIterator[bytes]:
        """The reply as the door frames it. A failure mid-stream (the reply could not be
        stored, too) becomes the door's error event and no end of stream, so the client
        can tell a cut-off reply from a finished one. A client that disconnects cancels
        this generator, and with it the upstream call."""
        status = CLIENT_CLOSED_REQUEST
        native = False  # the provider's own events, its end of stream included
        turns = Turns()  # the others' turns, however fast the provider's events come
        relayed = 0
        try:
            async for batch in events:
                native = batch.native
                if native:
                    framed = framer.relay(batch.raw or b"")
                else:
                    framed = framer.chunks(batch.chunks, batch.raw)
                relayed += len(framed)
                for part in _parts(framed):
                    yield part
                    await turns.taken()
            status = 200
        except ProxyError as exc:
            status = status_of(exc)
            scrubbed = exc.redacted(lambda text: self.upstream.redact(text, caller.presented))
            logger.warning(
                "a %s stream failed (%d): %s", events.turn.model, status, scrubbed.message
            )
            yield framer.error(error_reply(scrubbed))
            return
        except Exception:  # a fault of ours: still the door's error event, never a cut
            status = 500
            logger.exception("a %s stream failed (500)", events.turn.model)
            yield framer.error(error_reply(_internal_error()))
            return
        finally:
            telemetry.finish(status)
        if not native:  # the end may repeat the whole reply (Responses' does, four times)
            for framed in await sized(relayed, framer.end):
                for part in _parts(framed):
                    yield part
                    await turns.taken()

    async def count_tokens(self, request: Request) -> Response:
        """Anthropic's `count_tokens`: what this proxy would send for the request, by its
        own counter (the planned window, where the request names a session)."""
        raw = await read_body(request, self.settings.server)
        caller = principal(request)
        inbound = await self.messages.counted(parse_json(raw))
        model = inbound.body["model"]
        if not caller.may_use(model, self.upstream.models.served_as(model)):
            raise model_not_allowed(model)
        self.upstream.models.check(model)
        context = self._request_context(request, caller, raw, inbound)
        tokens = await self.engine.count(inbound.body, context)
        return ORJSONResponse({"input_tokens": tokens})

    async def metrics(self, request: Request) -> Response:
        body, content_type = exposition()
        return Response(body, media_type=content_type)

    async def models(self, request: Request) -> Response:
        caller = principal(request)
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "context-proxy"}
            for name in self.upstream.models.listed()
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
        return ORJSONResponse({"status": "ok", "models": len(self.upstream.models.names())})


def _said_dropped(api: Api, model: str, dropped: list[str]) -> list[str]:
    """`dropped` counted by their metric label, and named for the client's header and
    the debug log as the client named them where that is a plain name: a header value
    of bounded length, and nothing a client could smuggle into it."""
    for name in dropped:
        DROPPED_FIELDS.labels(api, field_label(name)).inc()
    named = [n if _PLAIN_NAME.fullmatch(n) else "other" for n in dropped[:_NAMED]]
    named += ["..."] if len(dropped) > _NAMED else []
    if named:
        logger.debug("%s request: not sent to %s: %s", api, model, ", ".join(named))
    return named


# A stream's bytes are written at most this many at a time: each write copies them once
# more (its chunk's framing), and a Responses end repeats the whole reply.
_WRITE = 1 << 20


def _parts(framed: bytes) -> Iterator[bytes]:
    """`framed` in writes of at most `_WRITE` bytes."""
    if len(framed) <= _WRITE:
        yield framed
        return
    for start in range(0, len(framed), _WRITE):
        yield framed[start : start + _WRITE]


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


def _error_handler(redact: Redactor) -> Callable[[Request, Exception], Awaitable[Response]]:
    async def proxy_error(request: Request, exc: Exception) -> Response:
        """Every error body leaves through here (or `_sse`), scrubbed of every credential
        known and of what the caller presented."""
        assert isinstance(exc, ProxyError)
        caller = request.scope.get("state", {}).get("principal")
        own = caller.presented if isinstance(caller, Principal) else ()
        scrubbed = exc.redacted(lambda text: redact(text, own))
        status = status_of(scrubbed)
        if status >= 500:  # ours or the provider's: the operator's to know
            logger.warning("%s answered %d: %s", request.url.path, status, scrubbed.message)
        extra = request.scope.get("state", {}).get("error_headers")
        return error_response(request.url.path, scrubbed, extra)

    return proxy_error


async def _too_deep(request: Request, exc: Exception) -> Response:
    """orjson writes at most 255 levels of nesting (it reads 1,024): a request whose JSON
    nests deeper cannot be hashed, stored or sent on. orjson says so with a TypeError
    (its JSONEncodeError); any other TypeError is a fault of ours, a 500."""
    if isinstance(exc, TypeError) and str(exc) != "Recursion limit reached":
        raise exc
    return error_response(request.url.path, too_deep())


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = OPENAI_TYPES.get(exc.status_code, "api_error")
    error = ErrorReply(exc.status_code, kind, str(exc.detail), code=str(exc.status_code))
    return reply_response(request.url.path, error)


async def _client_gone(request: Request, exc: Exception) -> Response:
    """Nobody is left to read an answer: no error of ours, and nothing to log."""
    return Response(status_code=CLIENT_CLOSED_REQUEST)


async def _unexpected_error(request: Request, exc: Exception) -> Response:
    return error_response(request.url.path, _internal_error())


def _internal_error() -> ProxyError:
    return InternalError("Internal error in context-proxy.", code="internal_error")


def create_app(
    settings: Settings | None = None, *, clock: Callable[[], float] = time.time
) -> Starlette:
    """The proxy's app. `clock` (epoch seconds) is the engine's "now" for money and a
    prompt cache's warmth (`Parts.clock`): the cost benchmark passes a virtual one."""
    settings = settings if settings is not None else load_settings()
    store = open_store(settings.session)
    upstream = Upstream(settings)
    secret = tenant_secret(settings.session)
    proxy = Proxy(settings=settings, upstream=upstream, store=store, secret=secret, clock=clock)
    sessions = SessionApi(
        engine=proxy.engine, upstream=upstream, store=store, server=settings.server
    )
    auth = Auth(settings.auth, secret)
    ui = viewer.Viewer(sessions, auth)
    chat = proxy.door(ChatDoor())
    messages = proxy.door(proxy.messages)
    ids = ResponseIds(secret)
    responses_door = ResponsesDoor(ids, settings.session.id_fields, store)
    responses = proxy.door(responses_door)
    compact = proxy.door(CompactDoor(responses_door))

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
        trimmer = asyncio.get_running_loop().create_task(heap.trimming())
        yield
        trimmer.cancel()
        await proxy.engine.close()
        await proxy.upstream.close()
        await store.close()

    app = Starlette(
        lifespan=lifespan,
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/chat/completions", chat, methods=["POST"]),
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", proxy.count_tokens, methods=["POST"]),
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/v1/responses/compact", compact, methods=["POST"]),
            Route("/v1/models", proxy.models, methods=["GET"]),
            Route("/health/live", proxy.live, methods=["GET"]),
            Route("/health/ready", proxy.ready, methods=["GET"]),
            Route("/metrics", proxy.metrics, methods=["GET"]),
            Route("/v1/sessions", sessions.list, methods=["GET"]),
            Route("/v1/sessions/{session_id}", sessions.get, methods=["GET"]),
            Route("/v1/sessions/{session_id}", sessions.delete, methods=["DELETE"]),
            Route("/v1/sessions/{session_id}/preview", sessions.preview, methods=["POST"]),
            Route("/v1/sessions/{session_id}/search", sessions.search, methods=["GET"]),
            Route("/v1/memories/{memory_id}", sessions.memory, methods=["GET"]),
            Route("/v1/memories/{memory_id}", sessions.forget, methods=["DELETE"]),
            Route("/v1/sessions/{session_id}/plans", sessions.plans, methods=["GET"]),
            *ui.routes(),
        ],
        middleware=[
            *browser.middleware(
                settings.server.cors_origins, settings.allowed_hosts(), error_response
            ),
            Middleware(
                AuthMiddleware,
                auth=auth,
                render=error_response,
                open_paths=OPEN_PATHS | viewer.OPEN,
                fallback=ui.principal,
            ),
        ],
        exception_handlers={
            ProxyError: _error_handler(upstream.redact),
            ClientDisconnected: _client_gone,
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
