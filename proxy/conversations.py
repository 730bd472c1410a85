"""Conversations: sessions, budgets and summaries around one chat request.

`prepare` turns what the client sent into what the model gets (reconcile with
the stored session, count, plan, summarize if the plan needs it); `record`
stores the reply. The pure parts (reconcile, planner, summarizer) live in their
own modules; this one does the I/O around them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from proxy import headers, metrics
from proxy.calibration import Calibration
from proxy.config import Settings
from proxy.context import ContextOverflowError, Plan, plan_context
from proxy.errors import ProxyError
from proxy.messages import GENESIS, chain, chain_hash, message_hash, split_system
from proxy.metrics import ModelLabels
from proxy.sessions import (
    Checkpoint,
    Mode,
    Session,
    SessionStore,
    StoredMessage,
    reconcile,
    tenant_id,
)
from proxy.summarize import SummarizationError, summarize_span
from proxy.tokens import TokenCounter, counter_for
from proxy.upstream import Upstream

logger = logging.getLogger("context_proxy.conversations")

Compression = Literal["none", "summary", "truncated"]
SessionKey = tuple[str, str]

# Texts longer than this (characters in one request's uncounted messages) are
# tokenized in a worker thread rather than on the event loop.
_OFF_LOOP_CHARS = 50_000
_SAVE_ATTEMPTS = 8


@dataclass
class Prepared:
    """One request, ready to go upstream, and what `record` needs afterwards."""

    body: dict[str, Any]
    model: str
    incoming: list[dict[str, Any]]
    key: SessionKey | None = None
    mode: Mode = "auto"
    counter: TokenCounter | None = None
    counts: dict[str, int] = field(default_factory=dict)  # message hash -> tokens
    checkpoint: Checkpoint | None = None  # made by this request, to store with the reply
    system: list[dict[str, Any]] = field(default_factory=list)
    system_tokens: int = 0  # the client's system messages, plus reply priming
    tools_tokens: int = 0
    budget: int = 0
    input_limit: int = 0
    tokens_original: int = 0
    tokens_sent: int = 0
    compression: Compression = "none"
    summary_created: float | None = None

    def response_headers(self) -> dict[str, str]:
        if self.counter is None:  # context management is off
            return {}
        values = {
            headers.TOKENS_ORIGINAL: str(self.tokens_original),
            headers.TOKENS_SENT: str(self.tokens_sent),
            headers.COMPRESSION: self.compression,
        }
        if self.summary_created is not None:
            age = max(0, int(time.time() - self.summary_created))
            values[headers.SUMMARY_AGE] = str(age)
        return values


@dataclass(frozen=True)
class RequestContext:
    """What the HTTP layer tells us about a request, beyond its body."""

    authorization: str | None = None
    session_id: str | None = None
    mode: Mode = "auto"
    budget_ratio: float | None = None  # overrides context.budget_ratio


class Conversations:
    def __init__(
        self, settings: Settings, upstream: Upstream, store: SessionStore, tenant_secret: bytes
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self.store = store
        self._secret = tenant_secret
        self._summarizing: dict[SessionKey, asyncio.Task[None]] = {}
        self.label = ModelLabels(settings.model_names())
        self.calibration = Calibration()

    def tenant(self, authorization: str | None) -> str:
        token = None
        if authorization and authorization.lower().startswith("bearer "):
            token = authorization[7:].strip()
        return tenant_id(token or None, self._secret)

    # -- a chat request ---------------------------------------------------------------

    async def prepare(self, body: dict[str, Any], request: RequestContext) -> Prepared:
        """Reconcile, count and plan; summarize now if the plan needs it."""
        prepared, session, plan = await self._prepare(body, request)
        if plan.summarize is not None:
            plan = await self._summarized_plan(prepared, session, plan.summarize)
        return _finish(prepared, plan)

    async def preview(self, body: dict[str, Any], request: RequestContext) -> dict[str, Any]:
        """What `prepare` would send, without calling any model: where a summary is
        due, the span is reported and the messages shown are the truncation fallback."""
        prepared, session, plan = await self._prepare(body, request)
        due = plan.summarize
        if due is not None:
            plan = self._plan(prepared, session, allow_summary=False)
        _finish(prepared, plan)
        return {
            "object": "session.preview",
            "model": prepared.model,
            "budget": prepared.budget,
            "tokens_original": prepared.tokens_original,
            "tokens_sent": prepared.tokens_sent,
            "compression": prepared.compression,
            "summary_due": {"start": due[0], "end": due[1]} if due else None,
            "messages": prepared.body["messages"],
        }

    async def close(self) -> None:
        for task in list(self._summarizing.values()):
            task.cancel()
        await asyncio.gather(*self._summarizing.values(), return_exceptions=True)

    async def _prepare(
        self, body: dict[str, Any], request: RequestContext
    ) -> tuple[Prepared, Session, Plan]:
        model = body["model"]
        prepared = Prepared(body=body, model=model, incoming=list(body["messages"]))
        if self.settings.context.mode == "off":
            return prepared, Session.new("", "", 0), _UNTOUCHED
        ratio = request.budget_ratio or self.settings.context.budget_ratio
        prepared.mode = request.mode
        prepared.counter = counter_for(
            self.upstream.provider_model(model), self.settings.context.token_counting
        )
        prepared.budget = self.budget(model, body, ratio)
        prepared.input_limit = self.upstream.limits(model).max_input_tokens
        prepared.tools_tokens = prepared.counter.count_tools(body.get("tools"))
        prepared.system, conversation = split_system(prepared.incoming)
        prepared.system_tokens = prepared.counter.count_messages(prepared.system)
        if request.session_id:
            prepared.key = (self.tenant(request.authorization), request.session_id)
            session = await self._reconciled(prepared)
        else:  # stateless: fitted to the budget by truncation, nothing stored
            session = Session.new("anonymous", "", time.time())
            session.transcript = [StoredMessage(m, message_hash(m)) for m in conversation]
        await self._count(prepared, session)
        plan = self._plan(prepared, session, allow_summary=prepared.key is not None)
        return prepared, session, plan

    def observe_usage(self, prepared: Prepared, usage: dict[str, Any] | None) -> None:
        """Calibrate our estimate against the provider's count of what we sent."""
        prompt_tokens = (usage or {}).get("prompt_tokens")
        if prepared.counter is not None and isinstance(prompt_tokens, int):
            label = self.label(prepared.model)
            self.calibration.observe(label, prepared.tokens_sent, prompt_tokens)

    async def record(self, prepared: Prepared, reply: dict[str, Any] | None) -> None:
        """Store the client's messages and the reply; then maybe summarize ahead of need."""
        if prepared.key is None or prepared.counter is None or reply is None:
            return
        session = await self._save(prepared, reply)
        if session is not None:
            self._schedule_summary(prepared, session)

    # -- budget and counting ----------------------------------------------------------

    def budget(self, model: str, body: dict[str, Any], ratio: float) -> int:
        """floor(ratio × input limit), and room left for the requested output, in our
        tokenizer's units: divided by the calibration factor when we undercount."""
        limits = self.upstream.limits(model)
        if limits.source == "default":
            metrics.MODEL_LIMIT_DEFAULTED.labels(self.label(model)).inc()
        budget = math.floor(ratio * limits.max_input_tokens)
        requested = body.get("max_completion_tokens") or body.get("max_tokens")
        if isinstance(requested, int) and requested > 0:
            budget = min(budget, limits.max_input_tokens - requested)
        budget = math.floor(budget / self.calibration.factor(self.label(model)))
        if budget <= 0:
            raise ProxyError(
                400,
                f"max_tokens={requested} leaves no room for input in {model}'s "
                f"{limits.max_input_tokens}-token context.",
                code="context_length_exceeded",
                param="max_tokens",
            )
        return budget

    async def _count(self, prepared: Prepared, session: Session) -> None:
        """Fill in token counts for messages this tokenizer has not seen yet."""
        counter = prepared.counter
        assert counter is not None
        missing = [m for m in session.transcript if counter.name not in m.tokens]
        if not missing:
            return
        size = sum(len(str(m.message.get("content") or "")) for m in missing)

        def count_all() -> None:
            for stored in missing:
                stored.tokens[counter.name] = counter.count_message(stored.message)

        if size > _OFF_LOOP_CHARS:
            await asyncio.to_thread(count_all)
        else:
            count_all()
        for stored in missing:
            prepared.counts[stored.hash] = stored.tokens[counter.name]

    # -- planning and summaries -------------------------------------------------------

    def _plan(
        self,
        prepared: Prepared,
        session: Session,
        *,
        allow_summary: bool,
        budget: int | None = None,
        keep_recent_ratio: float | None = None,
    ) -> Plan:
        counter = prepared.counter
        assert counter is not None
        checkpoint = session.latest_checkpoint()
        transcript = [m.message for m in session.transcript]
        counts = [m.tokens[counter.name] for m in session.transcript]
        prepared.tokens_original = prepared.system_tokens + sum(counts) + prepared.tools_tokens
        try:
            plan = plan_context(
                system=prepared.system,
                transcript=transcript,
                transcript_tokens=counts,
                summary=checkpoint.text if checkpoint else None,
                summary_covers=checkpoint.covers_until if checkpoint else 0,
                budget=budget or prepared.budget,
                counter=counter,
                tools_tokens=prepared.tools_tokens,
                keep_recent_ratio=keep_recent_ratio or self.settings.context.keep_recent_ratio,
                allow_summary=allow_summary,
                system_tokens=prepared.system_tokens,
            )
        except ContextOverflowError as exc:
            raise ProxyError(
                400,
                f"This model's context budget is {prepared.budget} tokens; {exc}.",
                code="context_length_exceeded",
                param="messages",
            ) from None
        if plan.compression == "summary" and checkpoint is not None:
            prepared.summary_created = checkpoint.created
        return plan

    async def _summarized_plan(
        self, prepared: Prepared, session: Session, span: tuple[int, int]
    ) -> Plan:
        """Plan after folding `span` into the summary; truncation if that fails."""
        assert prepared.key is not None
        running = self._summarizing.get(prepared.key)
        if running is not None:  # a background summary is on its way: wait for it
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    asyncio.shield(running), self.settings.context.summary_timeout_seconds
                )
            session = await self._reconciled(prepared)
            await self._count(prepared, session)
            plan = self._plan(prepared, session, allow_summary=True)
            if plan.summarize is None:
                return plan
            span = plan.summarize
        try:
            checkpoint = await asyncio.wait_for(
                self._summarize(session, span, prepared.model, prepared.budget, "sync"),
                self.settings.context.summary_timeout_seconds,
            )
        except (SummarizationError, ProxyError, TimeoutError) as exc:
            logger.warning("summarization failed, truncating instead: %s", exc)
            return self._plan(prepared, session, allow_summary=False)
        prepared.checkpoint = checkpoint
        session.checkpoints.append(checkpoint)
        await self._add_checkpoint(prepared.key, checkpoint)
        return self._plan(prepared, session, allow_summary=False)

    async def _summarize(
        self,
        session: Session,
        span: tuple[int, int],
        model: str,
        budget: int,
        mode: Literal["sync", "background"],
    ) -> Checkpoint:
        """Fold transcript[span] into the summary that ends where the span starts.

        The summary may take at most half of what the window leaves beside the
        verbatim recent messages (and `max_summary_tokens`), so it always fits.
        """
        start, end = span
        previous = session.latest_checkpoint()
        if previous is not None and previous.covers_until != start:
            previous = None  # planner spans always start at the latest checkpoint
        summary_model = self.settings.context.summary_model or model
        counter = counter_for(
            self.upstream.provider_model(summary_model), self.settings.context.token_counting
        )
        context = self.settings.context
        room = math.floor(budget * (1 - context.keep_recent_ratio) / 2)
        max_summary = max(32, min(context.max_summary_tokens, room))
        limit = self.upstream.limits(summary_model).max_input_tokens
        label = self.label(summary_model)
        started = time.perf_counter()
        outcome = "error"
        try:
            result = await summarize_span(
                previous=previous.text if previous else None,
                span=[m.message for m in session.transcript[start:end]],
                complete=self.upstream.complete_text,
                model=summary_model,
                counter=counter,
                budget_tokens=math.floor(context.budget_ratio * limit) - max_summary,
                max_summary_tokens=max_summary,
            )
            outcome = "success"
        except asyncio.CancelledError:
            outcome = "timeout"
            raise
        finally:
            metrics.SUMMARIZATIONS.labels(label, outcome, mode).inc()
            metrics.SUMMARIZATION_DURATION.labels(label, mode).observe(
                time.perf_counter() - started
            )
        metrics.SUMMARIZATION_TOKENS.labels(label, "input").inc(result.input_tokens)
        metrics.SUMMARIZATION_TOKENS.labels(label, "output").inc(
            counter.count_text(result.raw_text)
        )
        metrics.FACT_RETENTION.labels(label).observe(result.retention)
        return Checkpoint(
            covers_until=end,
            chain_hash=_chain_head(session, end),
            text=result.text,
            tokens=counter.count_text(result.text),
            model=summary_model,
            created=time.time(),
        )

    def _schedule_summary(self, prepared: Prepared, session: Session) -> None:
        """After a reply, summarize in the background once the session passes
        `summarize_at` of its budget, so the next request finds the summary ready.

        The plan is made as if the budget were `summarize_at` of it, verbatim part
        included: the fold leaves `keep_recent_ratio` of that smaller budget, so the
        summary plus what stays verbatim lands well under the trigger and the next
        fold is several turns away (keeping the prefix stable for prompt caches)."""
        key = prepared.key
        assert key is not None
        if key in self._summarizing:
            return
        context = self.settings.context
        plan = self._plan(
            replace(prepared),
            session,
            allow_summary=True,
            budget=math.floor(context.summarize_at * prepared.budget),
        )
        if plan.summarize is None:
            return

        async def run() -> None:
            # A shared store (Redis) also keeps other replicas from making the same summary.
            try_lock = getattr(self.store, "try_lock", None)
            lease = 2 * context.summary_timeout_seconds
            token = await try_lock(*key, lease) if try_lock is not None else None
            if try_lock is not None and token is None:
                self._summarizing.pop(key, None)
                return
            metrics.BACKGROUND_TASKS.inc()
            try:
                checkpoint = await self._summarize(
                    session, plan.summarize, prepared.model, prepared.budget, "background"
                )
                await self._add_checkpoint(key, checkpoint)
            except Exception as exc:  # the next request falls back; never store an error
                logger.warning("background summarization failed: %s", exc)
            finally:
                metrics.BACKGROUND_TASKS.dec()
                self._summarizing.pop(key, None)
                if token is not None:
                    await self.store.unlock(*key, token)  # type: ignore[attr-defined]

        self._summarizing[key] = asyncio.get_running_loop().create_task(run())

    # -- the store --------------------------------------------------------------------

    async def _reconciled(self, prepared: Prepared) -> Session:
        return (await self._load(prepared))[1]

    async def _load(self, prepared: Prepared) -> tuple[Session | None, Session]:
        """The stored session, and what it becomes with this request's messages."""
        assert prepared.key is not None
        tenant, session_id = prepared.key
        stored = await self.store.get(tenant, session_id)
        result = reconcile(
            stored,
            prepared.incoming,
            prepared.mode,
            tenant=tenant,
            session_id=session_id,
            now=time.time(),
        )
        if result.kind == "fork":
            logger.info("session forked at message %d (edit or regenerate)", result.fork_at)
        return stored, result.session

    async def _save(self, prepared: Prepared, reply: dict[str, Any]) -> Session | None:
        """Compare-and-set: replay this request onto the freshest session until it lands."""
        assert prepared.key is not None and prepared.counter is not None
        reply_hash = message_hash(reply)
        reply_tokens = prepared.counter.count_message(reply)
        for _ in range(_SAVE_ATTEMPTS):
            stored, session = await self._load(prepared)
            session.transcript.append(
                StoredMessage(reply, reply_hash, {prepared.counter.name: reply_tokens})
            )
            session.head = chain_hash(session.head, reply_hash)
            for message in session.transcript:
                count = prepared.counts.get(message.hash)
                if count is not None:
                    message.tokens.setdefault(prepared.counter.name, count)
            if prepared.checkpoint is not None:
                _add_if_valid(session, prepared.checkpoint)
            session.version = (stored.version if stored else 0) + 1
            session.updated = time.time()
            if await self.store.put(session, stored.version if stored else 0):
                return session
        logger.error("could not store session after %d attempts (conflicts)", _SAVE_ATTEMPTS)
        raise ProxyError(
            409, "The session was changed concurrently; retry the request.", code="conflict"
        )

    async def _add_checkpoint(self, key: SessionKey, checkpoint: Checkpoint) -> None:
        """Store a checkpoint if the session still holds the exact prefix it summarizes."""
        for _ in range(_SAVE_ATTEMPTS):
            stored = await self.store.get(*key)
            if stored is None or not _add_if_valid(stored, checkpoint):
                return
            expected = stored.version
            stored.version += 1
            if await self.store.put(stored, expected):
                return


def _add_if_valid(session: Session, checkpoint: Checkpoint) -> bool:
    end = checkpoint.covers_until
    if end > len(session.transcript) or any(
        c.covers_until == end and c.chain_hash == checkpoint.chain_hash for c in session.checkpoints
    ):
        return False
    if _chain_head(session, end) != checkpoint.chain_hash:
        return False
    session.checkpoints.append(checkpoint)
    session.checkpoints.sort(key=lambda c: c.covers_until)
    return True


# Context management off: the request goes upstream exactly as the client sent it.
_UNTOUCHED = Plan([], 0, "none", None, 0)


def _finish(prepared: Prepared, plan: Plan) -> Prepared:
    if plan is not _UNTOUCHED:
        prepared.body = prepared.body | {"messages": plan.messages}
        prepared.tokens_sent = plan.tokens
        prepared.compression = plan.compression
    return prepared


def _chain_head(session: Session, end: int) -> str:
    """The hash chain's value after transcript[:end]."""
    heads = chain(m.hash for m in session.transcript[:end])
    return heads[-1] if heads else GENESIS
