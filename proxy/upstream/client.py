"""The one door to providers: a LiteLLM Router built from the config's `model_list`.

Retries, fallbacks and load balancing are LiteLLM's. This module decides which
request parameters may pass, turns LiteLLM's objects into plain OpenAI JSON,
and turns LiteLLM's exceptions into `UpstreamFailure`s with no secrets in them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import orjson

from proxy.config.settings import ConfigError, Settings
from proxy.errors import ProxyError, UpstreamFailure
from proxy.observability.redaction import Redactor
from proxy.upstream import adapter
from proxy.upstream.failures import failure, untranslatable
from proxy.upstream.lean import Completion, Events, unfinished
from proxy.upstream.models import OPENAI_OWN, Models
from proxy.upstream.native import (
    ITEMS,
    NativeApi,
    NativeClient,
    NativeStream,
    lean_covers,
    native_events,
    native_json,
)
from proxy.upstream.router import (
    anthropic_models,
    fallbacks_for,
    lean_models,
    lean_native_models,
    native_models,
    router_for,
)

__all__ = ["PROVIDER_HINTS", "Upstream"]

logger = logging.getLogger("context_proxy.upstream")
T = TypeVar("T")

# Chat parameters that are hints only OpenAI has (caching, moderation, abuse tracking,
# metadata, verbosity): sent to a model that takes them (`Models.supports`), dropped and
# said for any other, never refused.
PROVIDER_HINTS = tuple(sorted(OPENAI_OWN | {"prompt_cache_key", "safety_identifier"}))


class Upstream:
    """Sends chat completions to providers through LiteLLM's Router.

    Models whose deployments (and fallbacks) all speak the OpenAI API take the lean
    path: the Router picks the deployment, retries and falls back as configured, and
    `DirectClient` makes the call. Everything else takes `litellm.acompletion`.
    """

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._router: adapter.Router | None = router_for(settings)
        self.models = Models(settings, self._router)
        self._direct = NativeClient(self._router, settings.server.max_upstream_reply_bytes)
        lean = settings.server.lean_upstream
        self.lean_models = lean_models(settings) if lean else frozenset()
        self._native = native_models(settings)
        self._anthropic = anthropic_models(settings)
        self._lean_native = lean_native_models(settings) if lean else {}
        # Every error text leaving the proxy passes through this.
        self.redact = Redactor.from_settings(settings)
        summary = settings.context.summary_model
        if summary is not None and not self.models.serves(summary):
            self.close_router()
            raise ConfigError(
                f"context.summary_model: `{summary}` is not a model this proxy serves"
                " (a model_list name, an alias or a wildcard route)"
            )

    async def complete_text(
        self,
        model: str,
        messages: list[dict[str, Any]],
        max_tokens: int,
        api_key: str | None = None,
    ) -> tuple[str, dict[str, Any] | None]:
        """One plain completion's text and the provider's usage: what the summarizer
        needs from a model (at temperature 0 where the model takes one)."""
        params: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens}
        if not self.models.reasons(model):
            params["temperature"] = 0
        completion = await self.complete(params, api_key=api_key)
        choices = completion.data.get("choices") or [{}]
        text = str((choices[0].get("message") or {}).get("content") or "")
        return text, completion.data.get("usage")

    def warm_up(self) -> None:
        """LiteLLM's own tokenizers of the configured models, loaded before the first
        request (`adapter.warm_token_counter`); a model LiteLLM does not know is left."""
        for name in self._settings.model_names():
            with contextlib.suppress(Exception):
                adapter.warm_token_counter(self.models.provider_model(name))

    async def close(self) -> None:
        await self._direct.close()
        self.close_router()

    def close_router(self) -> None:
        if self._router is not None:
            # A Router hooks itself into LiteLLM's global callback lists, which hold at
            # most 30: a later Router (another app in this process) would be left without
            # its cooldown callbacks if this one stayed hooked.
            self._router.discard()
            self._router = None

    async def complete(
        self,
        params: dict[str, Any],
        messages_json: bytes | None = None,
        api_key: str | None = None,
        models: frozenset[str] | None = None,
    ) -> Completion:
        """A completion; `messages_json`, when given, is `params["messages"]` serialized;
        `api_key`, when given, replaces the deployment's (passthrough); `models`, when
        given, are all the caller's key may use, fallbacks included."""
        params = params | {"stream": False}
        messages_json = _encoded(params, messages_json)
        options = self._options(api_key, models)

        async def call() -> Any:
            if params["model"] in self.lean_models:
                return await self._routed(self._direct.complete, params, messages_json, options)
            return await self._call(params, options)

        try:
            response = await _within(self._settings.server.request_timeout_seconds, call())
        except Exception as exc:
            raise self.error(exc, api_key) from None
        if isinstance(response, Completion):
            return response
        data = _openai_completion(_plain(response))
        if not data.get("choices"):  # LiteLLM reads a reply of no choices as one
            raise UpstreamFailure("The provider's reply is not a chat completion.")
        return Completion(data)

    async def stream(
        self,
        params: dict[str, Any],
        messages_json: bytes | None = None,
        api_key: str | None = None,
        models: frozenset[str] | None = None,
    ) -> AsyncIterator[Events]:
        """The stream's events. The call is made, and its first events read, before
        this returns: a failure before any byte reaches the client (an error as the first
        event included) surfaces here, as an error status."""
        params = params | {"stream": True}
        messages_json = _encoded(params, messages_json)
        options = self._options(api_key, models)

        async def opened() -> tuple[Events, AsyncIterator[Events]]:
            if params["model"] in self.lean_models:
                call = self._direct.stream
                events = await self._routed(call, params, messages_json, options)
            else:
                events = self._chunks(await self._call(params, options))
            return await anext(events), events

        try:
            timeout = self._settings.server.request_timeout_seconds
            first, events = await _within(timeout, opened())
        except Exception as exc:
            raise self.error(exc, api_key) from None
        return self._relayed(first, events, api_key)

    def native(self, model: str, api: NativeApi) -> bool:
        """Whether `model`'s every deployment speaks `api` (`router.native_models`)."""
        return model in self._native[api]

    async def native_complete(
        self,
        api: NativeApi,
        request: dict[str, Any],
        api_key: str | None = None,
        models: frozenset[str] | None = None,
        serialized: tuple[bytes, bool] | None = None,
    ) -> dict[str, Any]:
        """One reply of the provider's own API: on the lean path, or through LiteLLM's
        route for it. `serialized`: the request's messages (input items) as JSON, and
        whether LiteLLM's route would send them as they are (`Native.serialized`)."""
        options = self._options(api_key, models)
        lean = self._lean_call(api, request, options, serialized, self._direct.native_complete)
        call = lean or self._native_call(api, request | {"stream": False}, options, serialized)
        try:
            response = await _within(self._settings.server.request_timeout_seconds, call)
        except Exception as exc:
            raise self.error(exc, api_key) from None
        return native_json(response)

    async def native_stream(
        self,
        api: NativeApi,
        request: dict[str, Any],
        reader: NativeStream,
        api_key: str | None = None,
        models: frozenset[str] | None = None,
        serialized: tuple[bytes, bool] | None = None,
    ) -> AsyncIterator[Events]:
        """The provider's own events, read by the door's `reader`; opened (its first
        event read) before this returns, as `stream` is."""
        options = self._options(api_key, models)

        async def opened() -> tuple[Events, AsyncIterator[Events]]:
            call = self._direct.native_stream
            lean = self._lean_call(api, request, options, serialized, call, reader)
            if lean is not None:
                events = await lean
            else:
                streamed = request | {"stream": True}
                response = await self._native_call(api, streamed, options, serialized)
                events = native_events(api, response, reader, self._direct.limit)
            return await anext(events), events

        try:
            timeout = self._settings.server.request_timeout_seconds
            first, events = await _within(timeout, opened())
        except Exception as exc:
            raise self.error(exc, api_key) from None
        return self._relayed(first, events, api_key)

    def _lean_call(
        self,
        api: NativeApi,
        request: dict[str, Any],
        options: dict[str, Any],
        serialized: tuple[bytes, bool] | None,
        call: Any,
        reader: NativeStream | None = None,
    ) -> Awaitable[Any] | None:
        """`call` of the lean native path on the deployment the Router picks, with its
        retries and fallbacks; None where LiteLLM's route takes the request."""
        model = request["model"]
        if model not in self._lean_native.get(api, ()):
            return None
        field = ITEMS[api]
        if serialized is None:
            items = orjson.dumps(request[field])
            serialized = items, lean_covers(api, items)
        items, covered = serialized
        if not covered:
            return None
        assert self._router is not None  # lean models are configured models
        rest = {key: value for key, value in request.items() if key not in (field, "model")}
        return adapter.call_with_fallbacks(
            self._router,
            model=model,
            original_function=call,
            messages=[],
            native_api=api,
            native_request=rest,
            native_items=items,
            native_reader=reader,
            lean_provider="anthropic" if api == "anthropic_messages" else "openai",
            drop_params=self._settings.server.drop_params,
            timeout=self._settings.server.request_timeout_seconds,
            **options,
        )

    async def _native_call(
        self,
        api: NativeApi,
        request: dict[str, Any],
        options: dict[str, Any],
        serialized: tuple[bytes, bool] | None,
    ) -> Any:
        assert self._router is not None  # native models are configured models
        if serialized is not None:  # LiteLLM's own copy: it may change what it is given
            request = request | {ITEMS[api]: orjson.loads(serialized[0])}
        options = options | self._litellm_options()
        if api == "anthropic_messages":
            return await self._router.aanthropic_messages(**request, **options)
        return await self._router.aresponses(**request, **options)

    async def _routed(
        self, call: Any, params: dict[str, Any], messages: bytes | None, options: dict[str, Any]
    ) -> Any:
        """`call` on the deployment the Router picks, with its retries and fallbacks."""
        assert self._router is not None
        payload = {key: value for key, value in params.items() if key != "model"}
        return await adapter.call_with_fallbacks(
            self._router,
            model=params["model"],
            original_function=call,
            messages=params["messages"],
            openai_payload=payload,
            openai_messages=messages,
            timeout=self._settings.server.request_timeout_seconds,
            **options,
        )

    async def _relayed(
        self, first: Events, events: AsyncIterator[Events], api_key: str | None
    ) -> AsyncIterator[Events]:
        yield first
        try:
            async for event in events:
                yield event
        except Exception as exc:
            raise self.error(exc, api_key) from None

    async def _chunks(self, response: Any) -> AsyncIterator[Events]:
        """LiteLLM's stream as OpenAI chunks. Its wrapper ends a stream the provider never
        finished with a `finish_reason` of its own making: that one is an error instead;
        and keeps no copy of the text here (`adapter.forget_streamed_text`)."""
        wrapper = None  # LiteLLM's own, found once the Router's has begun
        try:
            async for chunk in response:
                if wrapper is None:
                    wrapper = adapter.stream_wrapper(response)
                adapter.forget_streamed_text(wrapper)
                data = _openai_chunk(_plain(chunk))
                finishing = any(c.get("finish_reason") for c in data["choices"])
                if finishing and not adapter.provider_finished(response):
                    raise unfinished()
                yield Events([data])
        finally:
            close = getattr(response, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):  # must not mask the real failure
                    await close()

    async def _call(self, params: dict[str, Any], options: dict[str, Any]) -> Any:
        options = options | self._litellm_options()
        if params["model"] in self._anthropic:  # this route reads no `shared_session`
            options["client"] = self._direct.http_client
        own = {name: params[name] for name in OPENAI_OWN if name in params}
        if own:  # left in only for an `openai/…` model: the body's own, as the client sent it
            params = {name: value for name, value in params.items() if name not in own}
            options["extra_body"] = own
        sent = _Sent()
        try:
            if self._router is not None and self.models.served_as(params["model"]) is not None:
                return await self._router.acompletion(**params, **options, logger_fn=sent)
            return await adapter.acompletion(**params, **options, logger_fn=sent)
        except Exception as exc:
            refused = None if sent.sent else untranslatable(exc)
            if refused is None:
                raise
            raise refused from None

    def _litellm_options(self) -> dict[str, Any]:
        """What every LiteLLM call is given: the request's deadline, the proxy's keep-alive
        pool (`proxy.upstream.connections`), and, where set, LiteLLM's own dropping of
        what the provider cannot take."""
        options: dict[str, Any] = {"timeout": self._settings.server.request_timeout_seconds}
        options["shared_session"] = self._direct.session
        if self._settings.server.drop_params:
            options["drop_params"] = True
        return options

    def _options(self, api_key: str | None, models: frozenset[str] | None) -> dict[str, Any]:
        """The Router's arguments for one caller: their own provider key (passthrough),
        and, for a key limited to some models, the fallbacks left to it."""
        options = _credentials(api_key)
        if models is not None:
            options |= fallbacks_for(self._router, models, self.models.served_as)[0]
        return options

    def error(self, exc: Exception, api_key: str | None = None) -> ProxyError:
        """Any LiteLLM or provider exception as an `UpstreamFailure`, minus secrets."""
        return failure(exc, lambda text: self.redact(text, (api_key,) if api_key else ()))

    def refused_fallbacks(self, model: str, models: frozenset[str] | None) -> list[str]:
        """The fallbacks of `model` (its own and the default ones) that a key limited to
        `models` may not use, so the Router will not try them for it."""
        if models is None or self._router is None:
            return []
        refused = fallbacks_for(self._router, models, self.models.served_as)[1]
        return sorted({*refused.get(model, ()), *refused.get("*", ())})


class _Sent:
    """LiteLLM's `logger_fn`, which its logging calls as a request is sent: a call that
    failed before is one LiteLLM could not make of the request (`untranslatable`)."""

    __slots__ = ("sent",)

    def __init__(self) -> None:
        self.sent = False

    def __call__(self, details: Any) -> None:
        self.sent = True


def _encoded(params: dict[str, Any], messages_json: bytes | None) -> bytes:
    """The messages serialized (once: the lean path splices these bytes into each
    attempt's body), and the other parameters checked to serialize, before any attempt:
    JSON nested too deep for orjson (which the Router would take for a failing
    deployment) raises `orjson.JSONEncodeError` here, a 400."""
    orjson.dumps({key: value for key, value in params.items() if key != "messages"})
    return messages_json if messages_json is not None else orjson.dumps(params["messages"])


async def _within(seconds: float, call: Awaitable[T]) -> T:
    """`call`'s result, or TimeoutError once `seconds` have passed: one deadline for the
    whole call, its retries and fallbacks included. A call still running then is
    cancelled and not waited for (LiteLLM's retry loop can outlive a cancellation)."""
    task = asyncio.ensure_future(call)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:  # the client went away
        task.cancel()
        raise
    if not done:
        task.cancel()
        task.add_done_callback(_retrieved)
        raise TimeoutError(f"no answer within {seconds:g} s")
    return task.result()


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Take a left task's outcome, so asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()


def _credentials(api_key: str | None) -> dict[str, Any]:
    """Call arguments that put the caller's own key in place of the deployment's."""
    return {"api_key": api_key} if api_key else {}


def _plain(obj: Any) -> dict[str, Any]:
    """A LiteLLM response object as OpenAI JSON (no LiteLLM-private fields)."""
    data = obj.model_dump(exclude_none=False) if hasattr(obj, "model_dump") else dict(obj)
    return {k: v for k, v in data.items() if not k.startswith("_")}


# Fields LiteLLM adds to OpenAI's objects; clients of an OpenAI-compatible API never see them.
_LITELLM_FIELDS = frozenset({"provider_specific_fields", "citations", "moderation"})
_NULL_OMITTED = frozenset({"tool_calls", "function_call", "audio", "reasoning_content"})


def _without(data: dict[str, Any], drop: frozenset[str], drop_none: frozenset[str] | None) -> dict:
    return {
        k: v
        for k, v in data.items()
        if k not in drop and not (v is None and (drop_none is None or k in drop_none))
    }


def _openai_usage(data: dict[str, Any]) -> None:
    if isinstance(data.get("usage"), dict):
        data["usage"] = _without(data["usage"], frozenset({"cost"}), frozenset())


def _openai_completion(data: dict[str, Any]) -> dict[str, Any]:
    data = _without(data, _LITELLM_FIELDS, frozenset())
    data["choices"] = [
        _without(choice, _LITELLM_FIELDS, frozenset())
        | {"message": _without(choice.get("message") or {}, _LITELLM_FIELDS, _NULL_OMITTED)}
        for choice in data.get("choices") or []
    ]
    _openai_usage(data)
    return data


def _openai_chunk(data: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's chunk shape: deltas carry only what is present, and the usage chunk
    (`stream_options.include_usage`) has an empty `choices` list."""
    data = _without(data, _LITELLM_FIELDS, frozenset())
    choices = [
        _without(choice, _LITELLM_FIELDS, frozenset())
        | {"delta": _without(choice.get("delta") or {}, _LITELLM_FIELDS, None)}
        for choice in data.get("choices") or []
    ]
    if data.get("usage") and all(not c["delta"] and not c.get("finish_reason") for c in choices):
        choices = []
    data["choices"] = choices
    _openai_usage(data)
    return data
