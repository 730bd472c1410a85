"""The turn: the one operation a door calls (`Engine.complete`, `Engine.stream`), its I/O
around the pure parts in an order only it knows (docs/architecture.md)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

from proxy.concurrency import sized
from proxy.config.settings import Settings
from proxy.conversation.identity import Message
from proxy.conversation.replies import (
    reply_message,
)
from proxy.conversation.tokens import counter_for_model
from proxy.conversation.validation import validate_messages
from proxy.costs.receipts import TurnCost
from proxy.costs.usage import usage_of
from proxy.engine.commit import concurrent_turn_error, drops_stored
from proxy.engine.events import TurnEvents, made
from proxy.engine.folds.summarizer import Bill
from proxy.engine.planner.agent_compaction import asks_to_compact
from proxy.engine.planner.caching import namespaced
from proxy.engine.preview import Previews
from proxy.engine.records import plan_record
from proxy.engine.remembering import with_memory_and_recall
from proxy.engine.types import (
    Observer,
    Request,
    RequestContext,
    Sent,
    SessionView,
    Turn,
    planned_turn,
)
from proxy.engine.wiring import wired
from proxy.errors import (
    ProxyError,
    SessionConflict,
    UpstreamFailure,
    previous_response_not_found,
)
from proxy.recall.meaning import vectors
from proxy.sessions.locks import Lease
from proxy.sessions.records import SessionMeta
from proxy.sessions.store import SessionStore
from proxy.sessions.stores import tenant_secret
from proxy.upstream.client import Upstream
from proxy.upstream.lean import Completion
from proxy.upstream.native import Native

__all__ = ["Engine"]

logger = logging.getLogger("context_proxy.engine")


class Engine:
    """The turns of one process: `clock` (epoch seconds) is every "now" that decides money
    or a cache's warmth, `monotonic` times what waits, and a test passes its own."""

    def __init__(
        self,
        *,
        settings: Settings,
        upstream: Upstream,
        store: SessionStore,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        secret: bytes | None = None,
    ) -> None:
        # The deployment's secret (`session.tenant_secret`): it keys what the proxy sends a
        # provider's prompt cache, so no caller can name another tenant's entries.
        secret = secret if secret is not None else tenant_secret(settings.session)
        self.parts = wired(
            settings=settings,
            upstream=upstream,
            store=store,
            clock=clock,
            monotonic=monotonic,
            secret=secret,
        )
        self.settings, self.upstream, self.store = settings, upstream, store
        self.summaries, self.label = self.parts.summaries, self.parts.label
        self.archive, self.memories = self.parts.archive, self.parts.memories
        self._previews = Previews(self.parts)

    async def close(self) -> None:
        await self.summaries.close()

    def warm_up(self) -> None:
        """Load the tokenizers and recall's model of meaning now rather than in the first
        request that needs one (a BPE file takes ~0.4 s to load, the meanings ~0.5 s)."""
        mode = self.settings.context.token_counting
        for name in self.settings.model_names():
            counter_for_model(self.upstream.models.provider_model(name), mode).count_text("warm up")
        self.upstream.warm_up()
        vectors(["warm up"])

    # -- a turn: the one operation a door calls -----------------------------------------

    async def complete(
        self,
        body: dict[str, Any],
        context: RequestContext,
        observer: Observer,
        native: Native | None = None,
    ) -> tuple[Turn, Completion]:
        """One turn answered whole (planned, sent, its reply stored, its session freed), in
        the door's own API where `native` is given."""
        turn = await self._prepare(body, context)
        try:
            observer.planned(turn)
            if turn.answer is not None:  # made here, with no model call
                completion = Completion(turn.answer)
            elif native is not None:
                observer.upstream_started()
                request = self._native_request(native, turn)
                turn = _sending(turn, native.api, request, native.serialized, context)
                reply = await self.upstream.native_complete(
                    native.api, request, context.provider_key, context.models, native.serialized
                )
                completion = Completion(_as_chat(native, reply), native=reply)
            else:
                observer.upstream_started()
                turn = _sending(turn, "chat", turn.body, None, context)
                completion = await self.upstream.complete(
                    turn.body, turn.messages_json, context.provider_key, context.models
                )
            observer.upstream_finished()
            usage = completion.data.get("usage")
            observer.used(usage)
            message = reply_message(completion.data)  # None: no reply in the completion
            observer.priced(await self._answered(turn, message, usage))
        except BaseException:
            await self._finish(turn, answered=False)
            raise
        await self._finish(turn, answered=message is not None)
        return turn, completion

    async def stream(
        self,
        body: dict[str, Any],
        context: RequestContext,
        observer: Observer,
        native: Native | None = None,
    ) -> TurnEvents:
        """One turn answered as a stream, its reply stored once the stream is complete; the
        caller ends the turn (`TurnEvents.aclose`)."""
        turn = await self._prepare(body, context)
        key = context.provider_key
        if turn.answer is not None:  # made here, with no model call
            observer.planned(turn)
            events = made(turn.answer)
            return TurnEvents(
                turn=turn,
                events=events,
                observer=observer,
                answered=self._answered,
                finish=self._finish,
            )
        try:
            observer.planned(turn)
            observer.upstream_started()
            if native is not None:
                request = self._native_request(native, turn)
                turn = _sending(turn, native.api, request, native.serialized, context)
                events = await self.upstream.native_stream(
                    native.api, request, native.stream(), key, context.models, native.serialized
                )
            else:
                turn = _sending(turn, "chat", turn.body, None, context)
                events = await self.upstream.stream(
                    turn.body, turn.messages_json, key, context.models
                )
        except BaseException:
            await self._finish(turn, answered=False)
            raise
        return TurnEvents(
            turn=turn,
            events=events,
            observer=observer,
            answered=self._answered,
            finish=self._finish,
        )

    # -- its steps ------------------------------------------------------------------------

    def _native_request(self, native: Native, turn: Turn) -> dict[str, Any]:
        """The planned turn in the door's own API, for what the model takes."""
        mid_system = self.upstream.models.capable(turn.model, "supports_mid_conversation_system")
        return native.request(turn.body, turn.compression == "summary", mid_system, turn.key)

    async def _prepare(self, body: dict[str, Any], context: RequestContext) -> Turn:
        """Reconcile, count and plan; summarize now if the plan needs it."""
        body = namespaced(body, self.parts.secret, context.tenant)
        if self.settings.context.mode == "off":
            check = functools.partial(validate_messages, body["messages"])
            await sized(len(context.body) if context.body else 0, check)
            return Turn(body, body["model"])
        request = await self.parts.intake.request(body, context)
        if request.key is None:
            return await self.parts.intake.stateless(body, request, context)
        # A turn that could not be stored is not paid for: the store takes what it may
        # write (at most the request's bytes, and the reply's).
        await self.store.writable((request.size or 0) + request.reply_limit)
        lease = await self.parts.locks.acquire(request.key)
        try:
            state = await self.parts.history.state(request)
            request = self.parts.intake.calibrated(body, context, request, state)
            if not state.counted:
                request = self.parts.intake.bounded(request)
            self.parts.intake.count_guessed_limit(request.model)
            if state.match.kind == "chapter":
                state = await self.parts.chapters.chapter(request, state)
            if state.match.kind != "side" and _compacting(request):
                # Answered from the session's summary, or planned as a turn of its
                # session (summary and window); never stored.
                answer = await self.parts.chapters.answer(request, state)
                if answer is None:
                    state = await self._folded_ahead(request, state)
                    answer = await self.parts.chapters.answer(request, state)
                if answer is not None:
                    return _answer_turn(body, request, state, lease, answer)
                turn = await self._plan_turn(body, request, state, lease)
                return replace(turn, side_request=True)
            if state.match.kind != "side":
                return await self._plan_turn(body, request, state, lease)
        except BaseException:
            await self.parts.locks.release(lease)
            raise
        await self.parts.locks.release(lease)  # a side request, not a turn: never stored
        logger.debug("a side request beside its session: answered, not stored")
        return replace(await self.parts.intake.stateless(body, request, context), side_request=True)

    async def _folded_ahead(self, request: Request, state: SessionView) -> SessionView:
        """An agent compacting rewrites its prompt, and so its cache, anyway: past the fold
        trigger the proxy folds now, which may answer it from the session's own summary."""
        plan = await self.parts.planning.plan(
            request, state, allow_summary=not request.own_budget, rewrite=True
        )
        if plan.summarize is None:
            return state
        bill = Bill()
        state, _ = await self.parts.inline.fold_and_plan(request, state, plan.summarize, bill)
        if bill.charge and request.key is not None:
            await self.summaries.store(request.key, None, bill.charge)
        return state

    async def _plan_turn(
        self, body: dict[str, Any], request: Request, state: SessionView, lease: Lease
    ) -> Turn:
        if request.continues is not None and _length(state.base) != request.continues:
            raise _not_latest(state.base, request.continues)
        if lease.contended and drops_stored(state):
            raise concurrent_turn_error()  # it would undo a turn it raced and never saw
        plan = await self.parts.planning.plan(request, state, allow_summary=not request.own_budget)
        bill = Bill()
        if plan.summarize is not None:
            state, plan = await self.parts.inline.fold_and_plan(
                request, state, plan.summarize, bill
            )
        plan, inserts = await with_memory_and_recall(
            self.parts.memories, self.parts.archive, request, state, plan
        )
        turn = replace(
            planned_turn(body, request, state, plan, lease), inserts=inserts, summaries=bill.charge
        )
        counter = request.counter
        checkpoint = state.checkpoint if plan.compression != "none" else None  # sent?
        summary = self.parts.planning.summary_tokens(counter, checkpoint)
        pinned = self.parts.planning.pinned_tokens(counter, checkpoint)
        record = plan_record(turn, plan, summary, pinned, self.parts.clock)
        return replace(turn, record=record)

    async def _answered(
        self, turn: Turn, reply: Message | None, usage: dict[str, Any] | None
    ) -> TurnCost | None:
        """The turn stored once the upstream finished its reply, and what follows a stored
        turn run; the turn's money, or None where it is unknown or no model was called."""
        used = usage_of(usage)
        self.parts.after.gauge(turn, used)
        if turn.answer is not None:
            return None
        stored = await self.parts.commits.stored(turn, reply, usage, used)
        if stored is not None:
            assert turn.request is not None
            self.parts.continuing.kept(turn, used, self.parts.clock())
            await self.parts.after.stored(turn.request, stored)
            return stored.cost
        if turn.prices is None or used is None:
            return None
        # Not a stored turn (no session, a side request, the proxy's context management
        # off): no previous turn tells what the cache held, so no saving is claimed.
        spent = turn.prices.cost(used)
        return TurnCost(spent, 0.0, spent)

    async def _finish(self, turn: Turn, answered: bool = True) -> None:
        """The turn is over, stored or not, so the session's next turn may start; the
        session still owes what an unanswered turn's summarizer calls cost."""
        try:
            key = turn.request.key if turn.request is not None else None
            if not answered and turn.summaries and key is not None:
                await self.summaries.store(key, None, turn.summaries)
        except Exception as exc:  # the turn's own failure is what the client hears of
            logger.warning("summary cost not recorded: %s", type(exc).__name__)
        finally:
            if turn.lease is not None:
                await self.parts.locks.release(turn.lease)

    async def preview(self, body: dict[str, Any], context: RequestContext) -> dict[str, Any]:
        """What a turn would send, without calling any model (`Previews.preview`)."""
        return await self._previews.preview(body, context)

    async def count(self, body: dict[str, Any], context: RequestContext) -> int:
        """The tokens a turn would send, calling no model (`Previews.count`)."""
        return await self._previews.count(body, context)


def _sending(
    turn: Turn,
    api: Literal["chat", "anthropic_messages", "responses"],
    request: dict[str, Any],
    serialized: tuple[bytes, bool] | None,
    context: RequestContext,
) -> Turn:
    """The turn with the prompt it sends, where a fold may continue it (a stored turn's)."""
    if turn.key is None or not turn.managed or turn.side_request:
        return turn
    return replace(turn, sent=Sent(api, request, serialized, context.models))


def _as_chat(native: Native, reply: dict[str, Any]) -> dict[str, Any]:
    """A provider's reply in its own API as a chat completion, or a 502 for one not of that
    API's shape, which is no fault of the client's."""
    try:
        return native.completion(reply)
    except (TypeError, KeyError, AttributeError, ValueError, IndexError):
        raise UpstreamFailure("The provider's reply is not of its API's shape.") from None


def _compacting(request: Request) -> bool:
    """The request asks for a summary of its conversation (an agent compacting it)."""
    return bool(request.conversation) and asks_to_compact(request.conversation[-1])


def _answer_turn(
    body: dict[str, Any], request: Request, state: SessionView, lease: Lease, answer: dict[str, Any]
) -> Turn:
    """A request for a summary answered from the session's (`Chapters.answer`): nothing
    sent, nothing stored."""
    name = request.counter.name
    history = state.totals[name] - state.before_origin(name)
    assert state.checkpoint is not None
    return Turn(
        body,
        request.model,
        managed=True,
        key=request.key,
        tokens_original=request.system_tokens + request.tools_tokens + history,
        tokens_sent=0,
        compression="summary",
        summary_created=state.checkpoint.created,
        input_limit=request.input_limit,
        request=request,
        state=state,
        lease=lease,
        side_request=True,
        prices=request.prices,
        answer=answer,
        transcript_length=state.length,
        transcript_head=state.head,
    )


def _length(meta: SessionMeta | None) -> int:
    return meta.length if meta is not None else 0


def _not_latest(meta: SessionMeta | None, continues: int) -> ProxyError:
    """The error for continuing a response that is not the latest of its conversation (never
    stored, deleted, or continued already)."""
    if _length(meta) < continues:
        return previous_response_not_found()
    return SessionConflict(
        "The previous response is not the latest of its conversation: a conversation"
        " continues from its latest response only.",
        code="conflict",
        param="previous_response_id",
    )
