"""The session engine: one turn's I/O around the pure parts (docs/architecture.md).

A door calls one operation, `complete` or `stream`: the turn is planned (`_prepare`:
reconcile with the stored session and count what is new in `History`, plan the window
and summarize if the plan says so in `Planning`), sent upstream, its reply stored
(`_commit`), and the session's turn lock given back (`_finish`), whatever happens. Per
request the work is one pass over the serialized conversation (C speed), Python work on
the new messages only, and a bounded window: the stored transcript is read only where a
plan needs it (a window over the budget, a client that sends only its new turn, an edit
of history), never in full.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import orjson

from proxy.config.settings import Settings
from proxy.conversation.identity import Message, split_system
from proxy.conversation.replies import (
    BYTES_PER_OUTPUT_TOKEN,
    MIN_REPLY_BYTES,
    StreamedReply,
    reply_message,
)
from proxy.conversation.tokens import IMAGE_TOKENS, CountCache, counter_for
from proxy.conversation.validation import validate_messages
from proxy.engine import agent_compaction, calibration
from proxy.engine.agent_compaction import asks_to_compact
from proxy.engine.archive import Archive
from proxy.engine.budget import budget
from proxy.engine.history import History, off_loop
from proxy.engine.planning import Planning
from proxy.engine.reconcile import frame_of
from proxy.engine.records import plan_record
from proxy.engine.remembering import Memories
from proxy.engine.summarizer import Summaries
from proxy.engine.types import (
    Observer,
    Request,
    RequestContext,
    SessionKey,
    State,
    Turn,
    planned_turn,
)
from proxy.engine.window import Plan
from proxy.errors import ProxyError, SessionConflict, previous_response_not_found
from proxy.observability import metrics
from proxy.observability.metrics import REPLIES_CUT, ModelLabels
from proxy.sessions.locks import Lease, TurnLocks
from proxy.sessions.records import (
    CAS_ATTEMPTS,
    Inserts,
    SessionMeta,
    SessionStore,
    StoredMessage,
)
from proxy.upstream.client import Upstream
from proxy.upstream.lean import Completion, Events
from proxy.upstream.native import Native

__all__ = ["Engine"]

logger = logging.getLogger("context_proxy.engine")

READ_BACK_SECONDS = 2.0  # to learn whether a commit whose answer was lost applied


class Engine:
    def __init__(self, settings: Settings, upstream: Upstream, store: SessionStore) -> None:
        self.settings = settings
        self.upstream = upstream
        self.store = store
        self.label = ModelLabels(upstream.models.served_as)
        # The calibration gauge, per model, smoothed over this process's turns: what the
        # operator sees. Each session's own plans its budget (`SessionMeta.calibration`).
        self._estimates: dict[str, float] = {}
        self.summaries = Summaries(settings, upstream, store, self.label)
        self._counts = CountCache()
        self._history = History(store, self._counts)
        self.archive = Archive(settings, store)
        self.memories = Memories(settings, store, self.archive)
        self._planning = Planning(
            settings, store, self._history, self.summaries, self._counts, self.archive
        )
        self._locks = TurnLocks(store, settings.session.turn_wait_seconds)

    async def close(self) -> None:
        await self.summaries.close()

    def warm_up(self) -> None:
        """Load the configured models' tokenizers now (a BPE file takes ~0.4 s to load)
        rather than in the first request that needs one."""
        mode = self.settings.context.token_counting
        for name in self.settings.model_names():
            counter_for(self.upstream.models.provider_model(name), mode).count_text("warm up")

    # -- a turn: the one operation a door calls -----------------------------------------

    async def complete(
        self,
        body: dict[str, Any],
        context: RequestContext,
        observer: Observer,
        native: Native | None = None,
    ) -> tuple[Turn, Completion]:
        """One turn answered whole: planned, sent, its reply stored, its session freed.
        With `native`, the turn goes in the door's own API (`proxy.upstream.native`)."""
        turn = await self._prepare(body, context)
        try:
            observer.planned(turn)
            if turn.answer is not None:  # made here, with no model call
                completion = Completion(turn.answer)
            elif native is not None:
                observer.upstream_started()
                request = native.request(turn.body, turn.compression == "summary")
                reply = await self.upstream.native_complete(
                    native.api, request, context.provider_key, context.models
                )
                completion = Completion(native.completion(reply), native=reply)
            else:
                observer.upstream_started()
                completion = await self.upstream.complete(
                    turn.body, turn.messages_json, context.provider_key, context.models
                )
            observer.upstream_finished()
            usage = completion.data.get("usage")
            observer.used(usage)
            await self._answered(turn, reply_message(completion.data), usage)
        finally:
            await self._finish(turn)
        return turn, completion

    async def stream(
        self,
        body: dict[str, Any],
        context: RequestContext,
        observer: Observer,
        native: Native | None = None,
    ) -> TurnEvents:
        """One turn answered as a stream: planned and opened here; the reply is stored
        once the stream is complete, and the caller ends the turn (`TurnEvents.aclose`)."""
        turn = await self._prepare(body, context)
        key = context.provider_key
        if turn.answer is not None:  # made here, with no model call
            observer.planned(turn)
            events = _made(turn.answer)
            return TurnEvents(turn, events, observer, self._answered, self._finish)
        try:
            observer.planned(turn)
            observer.upstream_started()
            if native is not None:
                request = native.request(turn.body, turn.compression == "summary")
                events = await self.upstream.native_stream(
                    native.api, request, native.stream(), key, context.models
                )
            else:
                events = await self.upstream.stream(
                    turn.body, turn.messages_json, key, context.models
                )
        except BaseException:
            await self._finish(turn)
            raise
        return TurnEvents(turn, events, observer, self._answered, self._finish)

    # -- its steps ------------------------------------------------------------------------

    async def _prepare(self, body: dict[str, Any], context: RequestContext) -> Turn:
        """Reconcile, count and plan; summarize now if the plan needs it."""
        if self.settings.context.mode == "off":
            validate_messages(body["messages"])
            return Turn(body, body["model"])
        request = self._request(body, context)
        if request.key is None:
            return await self._stateless(body, request, context)
        # A turn that could not be stored is not paid for: the store takes what it may
        # write (at most the request's bytes, and the reply's).
        await self.store.writable((request.size or 0) + request.reply_limit)
        lease = await self._locks.acquire(request.key)
        try:
            state = await self._history.state(request)
            request = self._calibrated(body, context, request, state)
            self._count_guessed_limit(request.model)
            if state.match.kind == "chapter":
                state = await self._planning.chapter(request, state)
            if state.match.kind != "side" and _compacting(request):
                # Answered from the session's summary, or planned as a turn of its
                # session (summary and window); never stored.
                answer = await self._planning.answer(request, state)
                if answer is not None:
                    return _answer_turn(body, request, state, lease, answer)
                turn = await self._planned(body, request, state, lease)
                return replace(turn, side=True)
            if state.match.kind != "side":
                return await self._planned(body, request, state, lease)
        except BaseException:
            await self._locks.release(lease)
            raise
        await self._locks.release(lease)  # a side request, not a turn: never stored
        logger.debug("a side request beside its session: answered, not stored")
        return replace(await self._stateless(body, request, context), side=True)

    async def _planned(
        self, body: dict[str, Any], request: Request, state: State, lease: Lease
    ) -> Turn:
        if request.continues is not None and _length(state.base) != request.continues:
            raise _not_latest(state.base, request.continues)
        if lease.contended and _drops_stored(state):
            raise _conflict()  # it would undo a turn it raced and never saw
        plan = await self._planning.plan(request, state, allow_summary=not request.own_budget)
        if plan.summarize is not None:
            state, plan = await self._planning.summarized(request, state, plan.summarize)
        plan, inserts = await self._extended(request, state, plan)
        turn = replace(planned_turn(body, request, state, plan, lease), inserts=inserts)
        counter = request.counter
        checkpoint = state.checkpoint if plan.compression != "none" else None  # sent?
        summary = self._planning.summary_tokens(counter, checkpoint)
        pinned = self._planning.pinned_tokens(counter, checkpoint)
        return replace(turn, record=plan_record(turn, plan, summary, pinned))

    async def _extended(self, request: Request, state: State, plan: Plan) -> tuple[Plan, Inserts]:
        """The plan with what the window alone lacks: remembered facts after the system
        prompt, then recalled history in what the budget leaves: the session's own, then
        the memory's other sessions'. With the session's inserts as this plan leaves
        them (stored with the turn, never by a preview)."""
        inserts = state.inserts or Inserts()
        plan, inserts = await self.memories.injected(request, request.memory_id, plan, inserts)
        plan, inserts = await self.archive.recalled(request, state, plan, inserts)
        return await self.memories.recalled(request, request.memory_id, plan), inserts

    async def _finish(self, turn: Turn) -> None:
        """The turn is over, stored or not: the session's next turn may start."""
        if turn.lease is not None:
            await self._locks.release(turn.lease)

    async def preview(self, body: dict[str, Any], context: RequestContext) -> dict[str, Any]:
        """What a turn would send, without calling any model: where a summary is due,
        the span is reported and the messages shown are the truncation fallback."""
        request = self._request(body, context)
        state = await self._history.state(request)
        request = self._calibrated(body, context, request, state)
        if state.match.kind == "chapter":
            state = await self._planning.chapter(request, state)
        due = None
        if state.match.kind == "side":  # as it would be sent: beside the session, counted
            turn = await self._stateless(body, request, replace(context, body=b""))
        else:
            plan = await self._planning.plan(request, state, allow_summary=not request.own_budget)
            due = plan.summarize
            if due is not None:
                plan = await self._planning.plan(request, state, allow_summary=False)
            plan, _ = await self._extended(request, state, plan)
            turn = planned_turn(body, request, state, plan)
        return {
            "object": "session.preview",
            "model": request.model,
            "budget": request.budget,
            "tokens_original": turn.tokens_original,
            "tokens_sent": turn.tokens_sent,
            "compression": turn.compression,
            "summary_due": {"start": due[0], "end": due[1]} if due else None,
            "messages": turn.body["messages"],
        }

    async def count(self, body: dict[str, Any], context: RequestContext) -> int:
        """The tokens a turn would send (by the proxy's own counter), calling no model."""
        request = self._request(body, context)
        if request.key is not None:
            return int((await self.preview(body, context))["tokens_sent"])
        conversation = request.conversation
        validate_messages(conversation, offset=len(request.system))
        counts = await off_loop(
            conversation, lambda: [request.counter.count_message(m) for m in conversation]
        )
        return self._planning.fit(request, conversation, counts, None, allow_summary=False).tokens

    async def _commit(
        self, turn: Turn, reply: dict[str, Any] | None, usage: dict[str, Any] | None
    ) -> None:
        """Store the client's new messages and the reply; then maybe summarize ahead.
        Under the turn lock only a background summary can have changed the session,
        and the turn is replayed onto it (compare-and-set); a transcript changed under
        the turn (its lease lapsed) is a conflict, never undone."""
        request, state = turn.request, turn.state
        if request is None or state is None or request.key is None or reply is None:
            return
        if turn.side:  # planned as a turn of its session, answered, never stored
            return
        pending, base = state.pending, state.base
        for _ in range(CAS_ATTEMPTS):
            if _transcript(state.base) != _transcript(base) and _drops_stored(state):
                raise _conflict()
            entry = await self._history.entry(
                reply,
                state.new[-1].chain if state.new else state.match.head,
                request.counter,
                state.totals,
                request.reply_limit,
            )
            learned = _calibration(state.base, self.label(request.model), turn.tokens_sent, usage)
            inserts, digest = _inserts(state.base, turn.inserts)
            meta, checkpoints = self._history.after(request, state, entry, learned, digest)
            entries = (*state.new, entry)
            record = orjson.dumps(turn.record | {"version": meta.version}) if turn.record else None
            lease = turn.lease
            release = lease.token if lease is not None else None
            try:
                done = await self.store.commit(
                    meta, state.expected, state.keep, entries, checkpoints, release, record, inserts
                )
                given_back = done
            except ProxyError:
                # No answer in time: the commit applied by its deadline, or never will.
                if not await self._applied(request.key, meta):
                    raise
                done, given_back = True, False
            if done:
                if lease is not None and given_back:  # given back with the commit
                    lease.stored = True
                if entry.message is not reply:
                    logger.warning("a reply over %d bytes is stored cut", request.reply_limit)
                    REPLIES_CUT.labels(self.label(request.model)).inc()
                if pending is not None and not checkpoints:  # replayed: store it if it applies
                    await self.summaries.store(request.key, pending)
                if not request.own_budget:
                    self._planning.maybe_summarize(request, meta)
                if request.memory_id is not None:
                    await self._learn(request, entries)
                return
            state = await self._history.state(request)
        logger.error("could not store session after %d attempts (conflicts)", CAS_ATTEMPTS)
        raise _conflict()

    def _calibrated(
        self, body: dict[str, Any], context: RequestContext, request: Request, state: State
    ) -> Request:
        """The request with its session's calibration applied to its budget."""
        learned = state.base.calibration if state.base is not None else {}
        ratio = learned.get(self.label(request.model))
        if ratio is None:
            return request
        limits = self.upstream.models.limits(request.model)
        share = context.budget_ratio or self.settings.context.budget_ratio
        return replace(request, budget=budget(request.model, limits, body, share, ratio))

    def _count_guessed_limit(self, model: str) -> None:
        """A turn planned on `context.default_context_window`, for want of a known limit."""
        if self.upstream.models.limits(model).source == "default":
            metrics.MODEL_LIMIT_DEFAULTED.labels(self.label(model)).inc()

    async def _applied(self, key: SessionKey, meta: SessionMeta) -> bool:
        """Whether a commit whose answer was lost applied after all: the session is at
        its version with its head, the chain value that names the turn's content (its
        turn id). Asked once, briefly: a store still away is a failed turn."""
        try:
            found = await asyncio.wait_for(self.store.load(*key), READ_BACK_SECONDS)
        except (ProxyError, TimeoutError):
            return False
        return found is not None and (found.version, found.head) == (meta.version, meta.head)

    async def _learn(self, request: Request, said: tuple[StoredMessage, ...]) -> None:
        """Remember what a stored turn said; the turn stands whatever happens here."""
        assert request.key is not None and request.memory_id is not None
        try:
            await self.memories.learn(request.key[0], request.memory_id, request.key[1], said)
        except Exception as exc:
            logger.warning("memory not updated: %s", self.summaries.redact(str(exc)))

    async def _answered(
        self, turn: Turn, reply: Message | None, usage: dict[str, Any] | None
    ) -> None:
        """The upstream finished its reply: learn from its usage, store the turn."""
        if turn.managed and turn.answer is None:
            label = self.label(turn.model)
            actual = (usage or {}).get("prompt_tokens")
            estimate = calibration.smoothed(self._estimates.get(label), turn.tokens_sent, actual)
            if estimate is not None:
                self._estimates[label] = estimate
                metrics.TOKEN_ESTIMATE_RATIO.labels(label).set(estimate)
        await self._commit(turn, reply, usage)

    # -- the request's facts ------------------------------------------------------------

    def _request(self, body: dict[str, Any], context: RequestContext) -> Request:
        model = body["model"]
        counter = counter_for(
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
        return Request(
            model=model,
            counter=counter,
            budget=budget(model, limits, body, ratio),
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
            reply_limit=reply_limit,
            input_price=limits.input_price,
        )

    async def _stateless(
        self, body: dict[str, Any], request: Request, context: RequestContext
    ) -> Turn:
        """No session: nothing stored, the request fitted by truncation. One that fits by
        its size in bytes (a bound on its tokens) is not even tokenized."""
        conversation = request.conversation
        validate_messages(conversation, offset=len(request.system))
        base = request.system_tokens + request.tools_tokens
        if context.body and base + _token_bound(context.body) <= request.budget:
            return Turn(body, request.model, managed=True, input_limit=request.input_limit)
        counts = await off_loop(
            conversation, lambda: [request.counter.count_message(m) for m in conversation]
        )
        plan = self._planning.fit(request, conversation, counts, None, allow_summary=False)
        original = base + sum(counts)
        return Turn(
            body | {"messages": plan.messages},
            request.model,
            managed=True,
            tokens_original=original,
            tokens_sent=plan.tokens,
            compression=plan.compression,
            input_limit=request.input_limit,
            input_price=request.input_price,
        )


def _compacting(request: Request) -> bool:
    """The request asks for a summary of its conversation (an agent compacting it)."""
    return bool(request.conversation) and asks_to_compact(request.conversation[-1])


def _answer_turn(
    body: dict[str, Any], request: Request, state: State, lease: Lease, answer: dict[str, Any]
) -> Turn:
    """A request for a summary answered from the session's (`Planning.answer`): nothing
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
        side=True,
        input_price=request.input_price,
        answer=answer,
    )


async def _made(answer: dict[str, Any]) -> AsyncIterator[Events]:
    """A reply made here, as one batch of stream chunks."""
    yield Events(agent_compaction.answer_chunks(answer))


def _calibration(
    base: SessionMeta | None, label: str, sent: int | None, usage: dict[str, Any] | None
) -> dict[str, float]:
    """The session's calibration once the provider counted what the turn sent."""
    learned = dict(base.calibration) if base is not None else {}
    ratio = calibration.smoothed(learned.get(label), sent, (usage or {}).get("prompt_tokens"))
    if ratio is not None:
        learned[label] = ratio
    return learned


def _inserts(base: SessionMeta | None, inserts: Inserts | None) -> tuple[bytes | None, str]:
    """What the commit writes of the session's inserts (None: nothing, as they are
    stored already, or none were chosen) and the meta's digest of them."""
    stored = base.inserts if base is not None else ""
    if inserts is None or inserts == Inserts():
        return None, stored if inserts is None else ""
    digest = inserts.digest()
    return (None if digest == stored else inserts.to_json()), digest


def _drops_stored(state: State) -> bool:
    """The turn cuts stored messages away (an edit of history, or a stale client)."""
    return state.base is not None and state.keep < state.base.length


def _length(meta: SessionMeta | None) -> int:
    return meta.length if meta is not None else 0


def _not_latest(meta: SessionMeta | None, continues: int) -> ProxyError:
    """A response that is not stored (its turn failed, or its session was deleted), or
    one a later turn continued already: only the latest response of a conversation
    can be continued."""
    if _length(meta) < continues:
        return previous_response_not_found()
    return SessionConflict(
        "The previous response is not the latest of its conversation: a conversation"
        " continues from its latest response only.",
        code="conflict",
        param="previous_response_id",
    )


def _transcript(meta: SessionMeta | None) -> tuple[int, str] | None:
    return (meta.length, meta.head) if meta is not None else None


def _conflict() -> SessionConflict:
    return SessionConflict(
        "The session gained messages from a concurrent turn that this request's history"
        " does not have; resend it with the session's current history.",
        code="conflict",
    )


def _token_bound(body: bytes) -> int:
    """At least as many tokens as the body's messages hold: every counter here makes at
    most one token of each byte of text, a message's JSON is longer than its overhead,
    and an image part (counted flat) appears as "image_url" twice (type and key)."""
    return len(body) + IMAGE_TOKENS * body.count(b'"image_url"')


class TurnEvents:
    """A streamed turn: the upstream's events as they come. The reply is stored only once
    the stream is complete; `aclose` ends the turn however the stream ended (done,
    failed, or cut off by the client before or after it began)."""

    def __init__(
        self,
        turn: Turn,
        events: AsyncIterator[Events],
        observer: Observer,
        answered: Callable[[Turn, Message | None, dict[str, Any] | None], Awaitable[None]],
        finish: Callable[[Turn], Awaitable[None]],
    ) -> None:
        self.turn = turn
        self._events = events
        self._observer = observer
        self._answered = answered
        self._finish = finish

    async def __aiter__(self) -> AsyncIterator[Events]:
        """The events as they come, but from the reply's finish on (its finish reason,
        usage, a native stream's own end event) only once it is stored: a client that
        hangs up when it has the end (Codex, at `response.completed`) has a stored turn,
        and one that hears of a failed store was never told the reply was done."""
        reply = StreamedReply()
        usage: dict[str, Any] | None = None
        held: list[Events] = []
        async for batch in self._events:
            for chunk in batch.chunks:
                reply.add(chunk)
                if chunk.get("usage"):
                    usage = chunk["usage"]
                    self._observer.used(usage)
                elif _has_output(chunk):
                    self._observer.first_token()
            if reply.finished:
                held.append(batch)
            else:
                yield batch
        self._observer.upstream_finished()
        await self._answered(self.turn, reply.message(), usage)
        for batch in held:
            yield batch

    async def aclose(self) -> None:
        await self._finish(self.turn)


def _has_output(chunk: dict[str, Any]) -> bool:
    deltas = [choice.get("delta") or {} for choice in chunk.get("choices") or []]
    return any(delta.get("content") or delta.get("tool_calls") for delta in deltas)
