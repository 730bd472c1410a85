"""The Starlette application: its routes and what they are wired to, and the turn
handler that every door's route runs (a stream written by `proxy.http.sse`, an error
answered by `proxy.http.errors`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.concurrency import pause, sized
from proxy.config.settings import Settings, load_settings
from proxy.conversation.needles import Needles
from proxy.conversation.validation import header_session_id
from proxy.doors.anthropic import MessagesDoor
from proxy.doors.base import Api, Door, Inbound, ORJSONResponse
from proxy.doors.chat import ChatDoor
from proxy.doors.parameters import field_label, not_sent
from proxy.doors.responses import CompactDoor, ResponseIds, ResponsesDoor
from proxy.doors.translations import Written
from proxy.engine import Engine, RequestContext
from proxy.errors import InvalidRequest, ProxyError
from proxy.http import browser, headers, heap, viewer
from proxy.http.auth import OPEN_PATHS, Auth, AuthMiddleware, Principal
from proxy.http.bodies import (
    CONVERSATION,
    ClientDisconnected,
    parse_json,
    parse_resent,
    principal,
    read_body,
    unless_disconnected,
)
from proxy.http.errors import (
    CLIENT_CLOSED_REQUEST,
    client_gone,
    error_response,
    http_error,
    proxy_error_handler,
    status_of,
    too_deep_error,
    unexpected_error,
)
from proxy.http.resends import Resends
from proxy.http.sessions import SessionApi, model_not_allowed
from proxy.http.sse import TurnStream, framed_events
from proxy.http.telemetry import RequestTelemetry
from proxy.observability.metrics import DROPPED_FIELDS, OTHER_MODEL, exposition
from proxy.sessions.records import Mode
from proxy.sessions.store import SessionStore
from proxy.sessions.stores import open_store, tenant_secret
from proxy.upstream.client import Upstream

__all__ = ["Proxy", "create_app"]

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
        # The suite's servers check every resent body against a whole parse (`Resends`),
        # and the JSON of every conversation a door holds against writing it again.
        self._checking = os.environ.get("PROXY_CHECK_RESENDS") == "1"
        self.resends = Resends(check=self._checking)

    def _request_context(
        self,
        request: Request,
        caller: Principal,
        body: bytes,
        inbound: Inbound,
        messages_json: memoryview | None = None,
        needles: Needles | None = None,
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
            messages_json=messages_json,
            needles=needles,
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
        caller = principal(request)
        # A conversation resent by the same caller, in the same session, through the same
        # door is parsed from where it is new.
        key = (caller.tenant, request.headers.get(self.settings.session.header), door.api)
        parse = functools.partial(parse_resent, raw, self.resends, key, CONVERSATION[door.api])
        parsed = await sized(len(raw), parse)  # a long body off the event loop
        await pause(len(raw))
        body = parsed.data
        conversation = body.get(CONVERSATION[door.api])
        json = parsed.messages_json
        written = None
        if json is not None and conversation is not None:
            written = Written(conversation, json, parsed.needles)
        inbound = await door.inbound(body, caller.tenant, written)
        model = inbound.body["model"]
        telemetry.model = self.engine.label(model)
        if not caller.may_use(model, self.upstream.models.served_as(model)):
            raise model_not_allowed(model)
        self.upstream.models.check(model)
        # The messages as orjson writes them: the client's, where the engine takes them as
        # sent, else the door's, where it holds them.
        same = written is not None and inbound.body.get("messages") is written.conversation
        messages_json = json if same else inbound.messages_json
        if (
            self._checking
            and not same
            and messages_json is not None
            and bytes(messages_json) != orjson.dumps(inbound.body["messages"])
        ):
            raise AssertionError("a door's JSON of its messages is not theirs")
        context = self._request_context(
            request, caller, raw, inbound, messages_json, parsed.needles
        )
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
                    framed_events(
                        events,
                        telemetry,
                        framer,
                        lambda text: self.upstream.redact(text, caller.presented),
                    ),
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
            ProxyError: proxy_error_handler(upstream.redact),
            ClientDisconnected: client_gone,
            HTTPException: http_error,
            orjson.JSONEncodeError: too_deep_error,  # TypeError itself
            RecursionError: too_deep_error,
            Exception: unexpected_error,
        },
    )
    # An API answers a path it does not serve with a 404, never a redirect (a client
    # following one would resend its body elsewhere).
    app.router.redirect_slashes = False
    return app
