"""A request's facts, worked out once (`Request`), its session's calibration applied once
the session is read, and a request of no session fitted on its own."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import orjson

from proxy.concurrency import off_loop, sized
from proxy.config.settings import Settings
from proxy.conversation.identity import split_system
from proxy.conversation.replies import BYTES_PER_OUTPUT_TOKEN, MIN_REPLY_BYTES
from proxy.conversation.tokens import (
    BOUND,
    CountCache,
    counter_for_model,
    within_token_bound,
)
from proxy.conversation.validation import Validated, invalid, validate_messages
from proxy.costs.prices import Prices
from proxy.engine.planner.budget import budget
from proxy.engine.planner.caching import BREAKPOINTS, cache_key, marks_in
from proxy.engine.planner.reconcile import bytes_of, frame_of
from proxy.engine.planner.window import Plan
from proxy.engine.planning import Planning, fold_trigger
from proxy.engine.types import Request, RequestContext, SessionView, Turn
from proxy.observability import metrics
from proxy.observability.metrics import ModelLabels
from proxy.upstream.client import Upstream

__all__ = ["Intake"]


class Intake:
    def __init__(
        self,
        *,
        settings: Settings,
        upstream: Upstream,
        counts: CountCache,
        planning: Planning,
        label: ModelLabels,
        secret: bytes,
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self._counts = counts
        self._planning = planning
        self.label = label
        self._secret = secret  # the deployment's: keys what reaches a provider's cache
        self._validated = Validated()  # conversations of no session, by their messages

    async def request(self, body: dict[str, Any], context: RequestContext) -> Request:
        """The request's facts, worked out in a worker thread for a large body: validating
        and counting megabytes of tools takes seconds."""
        size = len(context.body) if context.body else 0
        return await sized(size, functools.partial(self._request, body, context))

    def _request(self, body: dict[str, Any], context: RequestContext) -> Request:
        model = body["model"]
        counter = counter_for_model(
            self.upstream.models.provider_model(model), self.settings.context.token_counting
        )
        system, conversation = split_system(body["messages"])
        validate_messages(system)
        tools = body.get("tools")
        system_json, tools_json = orjson.dumps(system), orjson.dumps(tools or [])  # once
        ratio = context.budget_ratio or self.settings.context.budget_ratio
        key = (context.tenant, context.session_id) if context.session_id else None
        limits = self.upstream.models.limits(model)
        reply_limit = self.settings.session.max_reply_bytes or max(
            MIN_REPLY_BYTES, BYTES_PER_OUTPUT_TOKEN * (limits.max_output_tokens or 0)
        )
        request = Request(
            model=model,
            counter=counter,
            budget=budget(model, limits.max_input_tokens, body, ratio),
            input_limit=limits.max_input_tokens,
            messages=body["messages"],
            system=system,
            conversation=conversation,
            system_tokens=self._counts.messages(counter, system, system_json),
            tools_tokens=self._counts.tools(counter, tools, tools_json),
            mode=context.mode,
            key=key,
            size=len(context.body) if context.body else None,
            own_budget=context.budget_ratio is not None,
            provider_key=context.provider_key,
            secrets=context.secrets,
            continues=context.continues,
            memory_id=context.memory_id,
            frame=frame_of(system_json, tools_json) if key is not None else "",
            messages_json=context.messages_json,
            reply_limit=reply_limit,
            prices=limits.prices,
            **self._caching(model, body, context, limits.prices),
        )
        if key is None:
            return request
        trigger = fold_trigger(request, self.settings.context.summarize_at)
        bounds = (  # by `BOUND`, counted once per process
            self._counts.messages(BOUND, system, system_json),
            self._counts.tools(BOUND, tools, tools_json),
        )
        return replace(
            request, sendable_uncounted=max(0, trigger - sum(bounds)), system_and_tools_bound=bounds
        )

    @staticmethod
    def bounded(request: Request) -> Request:
        """The request as planned while its session is known only by its bound: every count
        by `BOUND`, so nothing is tokenized and the history goes whole."""
        system_tokens, tools_tokens = request.system_and_tools_bound
        return replace(
            request, counter=BOUND, system_tokens=system_tokens, tools_tokens=tools_tokens
        )

    def _caching(
        self, model: str, body: dict[str, Any], context: RequestContext, prices: Prices | None
    ) -> dict[str, Any]:
        """What a session's turn adds for the provider's prompt cache, and a 400, before
        anything is paid, for more cache marks than Anthropic takes."""
        if prices is None:
            return {}
        marks = None
        if prices.cache == "breakpoints" and context.body:
            counted = context.needles
            marks = counted.marks if counted is not None else marks_in(context.body)
            if marks > BREAKPOINTS:
                raise invalid(
                    "cache_control",
                    f"At most {BREAKPOINTS} blocks may carry `cache_control` (the provider's"
                    f" limit); this request has {marks}.",
                )
        if context.session_id is None or not self.settings.context.cache_aware:
            return {}
        if marks is not None:
            return {"cache_marks": marks}
        if "prompt_cache_key" not in body and self._takes_cache_key(model):
            return {"cache_key": cache_key(self._secret, context.tenant, context.session_id)}
        return {}

    @functools.lru_cache(maxsize=256)  # noqa: B019 - one Intake per engine, bounded
    def _takes_cache_key(self, model: str) -> bool:
        return self.upstream.models.supports(model, "prompt_cache_key")

    async def stateless(
        self, body: dict[str, Any], request: Request, context: RequestContext
    ) -> Turn:
        """No session: nothing stored, the request fitted by truncation, and not even
        tokenized where its size in bytes bounds its tokens within the budget."""
        await self.validated(request)
        base = request.system_tokens + request.tools_tokens
        images = context.needles.images if context.needles is not None else None
        if context.body and within_token_bound(context.body, request.budget - base, images):
            written = request.messages_json
            return Turn(
                body,
                request.model,
                managed=True,
                input_limit=request.input_limit,
                prices=request.prices,
                messages_json=bytes_of(written) if written is not None else None,
            )
        counts, plan = await self.truncated(request)
        original = base + sum(counts)
        return Turn(
            body | {"messages": plan.messages},
            request.model,
            managed=True,
            tokens_original=original,
            tokens_sent=plan.tokens,
            compression=plan.compression,
            input_limit=request.input_limit,
            prices=request.prices,
        )

    async def validated(self, request: Request) -> None:
        """A conversation of no session validated from where it is new (`Validated`), off
        the loop where its body is large (its size decides: measuring its messages would
        be a pass over them)."""
        size = request.size or 0
        check = functools.partial(
            self._validated.validate, request.conversation, len(request.system), size
        )
        await sized(size, check)

    async def truncated(self, request: Request) -> tuple[list[int], Plan]:
        """A conversation of no session counted, message by message, and fitted by
        truncation, off the event loop where it is large."""
        conversation = request.conversation

        def counted_and_cut() -> tuple[list[int], Plan]:
            counts = [request.counter.count_message(message) for message in conversation]
            return counts, self._planning.plan_counted(
                request, conversation, counts, None, allow_summary=False
            )

        if request.size is not None:
            return await sized(request.size, counted_and_cut)
        result: tuple[list[int], Plan] = await off_loop(conversation, counted_and_cut)
        return result

    def calibrated(
        self, body: dict[str, Any], context: RequestContext, request: Request, state: SessionView
    ) -> Request:
        """The request with its session's calibration applied to its budget."""
        learned = state.base.calibration if state.base is not None else {}
        ratio = learned.get(self.label(request.model))
        if ratio is None:
            return request
        limits = self.upstream.models.limits(request.model)
        share = context.budget_ratio or self.settings.context.budget_ratio
        tokens = budget(request.model, limits.max_input_tokens, body, share, ratio)
        return replace(request, budget=tokens)

    def count_guessed_limit(self, model: str) -> None:
        """A turn planned on `context.default_context_window`, for want of a known limit."""
        if self.upstream.models.limits(model).source == "default":
            metrics.MODEL_LIMIT_DEFAULTED.labels(self.label(model)).inc()
