"""The session engine: one chat request's I/O around the pure parts (DESIGN §1).

`prepare` turns what the client sent into what the model gets: reconcile with the stored
session, count what is new, plan the window, summarize if the plan says so. `commit`
stores the turn's new messages and the reply. Per request the work is one pass over the
serialized conversation (C speed), Python work on the new messages only, and a bounded
window: the stored transcript is read only where a plan needs it (a window over the
budget, a client that sends only its new turn, an edit of history), never in full.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Literal

from proxy import headers
from proxy.budget import Budgets
from proxy.config import Settings
from proxy.context import ContextOverflowError, Plan, plan_context, summary_message
from proxy.errors import ProxyError
from proxy.messages import chain, message_hash, split_system
from proxy.metrics import ModelLabels
from proxy.reconcile import NEED_STORED_HASHES, Match, Serialized, reconcile
from proxy.sessions import Checkpoint, Mode, SessionMeta, SessionStore, StoredMessage, tenant_id
from proxy.summaries import SessionKey, Summaries
from proxy.summarize import SummarizationError
from proxy.tokens import IMAGE_TOKENS, CountCache, TokenCounter, counter_for, counter_named
from proxy.upstream import Upstream
from proxy.validation import validate_messages

__all__ = ["Engine", "RequestContext", "Turn", "pause"]

logger = logging.getLogger("context_proxy.engine")

Compression = Literal["none", "summary", "truncated"]
# Texts longer than this (characters in one request's uncounted messages) are
# tokenized in a worker thread rather than on the event loop.
_OFF_LOOP_CHARS = 50_000
_OFF_LOOP_MESSAGES = 256
_PAUSE_BYTES = 256 * 1024  # bodies above this yield to other requests between passes
_COMMIT_ATTEMPTS = 8


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What the HTTP layer tells the engine about a request, beyond its body."""

    authorization: str | None = None
    session_id: str | None = None
    mode: Mode = "auto"
    budget_ratio: float | None = None  # overrides context.budget_ratio
    body: bytes = b""  # the raw request body: its size bounds its tokens


@dataclass(frozen=True, slots=True)
class Request:
    """A request's facts, worked out once."""

    model: str
    counter: TokenCounter
    budget: int
    input_limit: int
    messages: list[dict[str, Any]]  # as sent: system, then conversation
    system: list[dict[str, Any]]
    conversation: list[dict[str, Any]]
    system_tokens: int  # reply priming included
    tools_tokens: int
    mode: Mode
    key: SessionKey | None
    size: int | None  # bytes of the request body, when known


@dataclass(frozen=True, slots=True)
class State:
    """The session as this request leaves it, before the reply: the stored transcript's
    first `match.keep` messages plus `new`."""

    base: SessionMeta | None
    match: Match
    new: tuple[StoredMessage, ...]
    totals: dict[str, int]  # of the transcript with `new`
    checkpoint: Checkpoint | None  # the summary in effect
    checkpoints: int
    expected: int  # version to compare-and-set against
    serialized: Serialized | None
    pending: Checkpoint | None = None  # made from `new`: stored with the turn

    @property
    def keep(self) -> int:
        return self.match.keep

    @property
    def length(self) -> int:
        return self.match.keep + len(self.new)


@dataclass(frozen=True, slots=True)
class Turn:
    """One request, ready to go upstream, and what `commit` needs afterwards."""

    body: dict[str, Any]
    model: str
    managed: bool = False  # context management on
    key: SessionKey | None = None
    tokens_original: int | None = None
    tokens_sent: int | None = None
    compression: Compression = "none"
    summary_created: float | None = None
    input_limit: int = 0
    request: Request | None = None
    state: State | None = None
    messages_json: bytes | None = None  # body["messages"], already serialized

    def response_headers(self) -> dict[str, str]:
        if not self.managed:
            return {}
        values = {headers.COMPRESSION: self.compression}
        if self.tokens_original is not None and self.tokens_sent is not None:
            values[headers.TOKENS_ORIGINAL] = str(self.tokens_original)
            values[headers.TOKENS_SENT] = str(self.tokens_sent)
        if self.summary_created is not None:
            values[headers.SUMMARY_AGE] = str(max(0, int(time.time() - self.summary_created)))
        return values


class Engine:
    def __init__(
        self, settings: Settings, upstream: Upstream, store: SessionStore, tenant_secret: bytes
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self.store = store
        self._secret = tenant_secret
        self.label = ModelLabels(settings.model_names())
        self.budgets = Budgets(upstream, self.label)
        self.summaries = Summaries(settings, upstream, store, self.label)
        self._counts = CountCache()

    def tenant(self, authorization: str | None) -> str:
        token = None
        if authorization and authorization.lower().startswith("bearer "):
            token = authorization[7:].strip()
        return tenant_id(token or None, self._secret)

    async def close(self) -> None:
        await self.summaries.close()

    def warm_up(self) -> None:
        """Load the configured models' tokenizers now (a BPE file takes ~0.4 s to load)
        rather than in the first request that needs one."""
        mode = self.settings.context.token_counting
        for name in self.settings.model_names():
            counter_for(self.upstream.provider_model(name), mode).count_text("warm up")

    # -- a chat request -------------------------------------------------------------------

    async def prepare(self, body: dict[str, Any], context: RequestContext) -> Turn:
        """Reconcile, count and plan; summarize now if the plan needs it."""
        if self.settings.context.mode == "off":
            validate_messages(body["messages"])
            return Turn(body, body["model"])
        request = self._request(body, context)
        if request.key is None:
            return await self._stateless(body, request, context)
        state = await self._state(request)
        plan = await self._plan(request, state, allow_summary=True)
        if plan.summarize is not None:
            state, plan = await self._summarized(request, state, plan.summarize)
        return self._turn(body, request, state, plan)

    async def preview(self, body: dict[str, Any], context: RequestContext) -> dict[str, Any]:
        """What `prepare` would send, without calling any model: where a summary is due,
        the span is reported and the messages shown are the truncation fallback."""
        request = self._request(body, context)
        state = await self._state(request)
        plan = await self._plan(request, state, allow_summary=True)
        due = plan.summarize
        if due is not None:
            plan = await self._plan(request, state, allow_summary=False)
        turn = self._turn(body, request, state, plan)
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

    async def commit(self, turn: Turn, reply: dict[str, Any] | None) -> None:
        """Store the client's new messages and the reply (compare-and-set, replaying the
        request onto the freshest session on a conflict); then maybe summarize ahead."""
        request, state = turn.request, turn.state
        if request is None or state is None or request.key is None or reply is None:
            return
        pending = state.pending
        for _ in range(_COMMIT_ATTEMPTS):
            entry = self._entry(
                reply,
                state.new[-1].chain if state.new else state.match.head,
                request.counter,
                state.totals,
            )
            meta, checkpoints = self._after(request, state, entry)
            entries = (*state.new, entry)
            if await self.store.commit(meta, state.expected, state.keep, entries, checkpoints):
                if pending is not None and not checkpoints:  # replayed: store it if it applies
                    await self.summaries.store(request.key, pending)
                self._maybe_summarize(request, meta)
                return
            state = await self._state(request)
        logger.error("could not store session after %d attempts (conflicts)", _COMMIT_ATTEMPTS)
        raise ProxyError(
            409, "The session was changed concurrently; retry the request.", code="conflict"
        )

    def observe_usage(self, turn: Turn, usage: dict[str, Any] | None) -> None:
        if turn.managed:
            self.budgets.observe(turn.model, turn.tokens_sent, usage)

    # -- the request's facts ------------------------------------------------------------

    def _request(self, body: dict[str, Any], context: RequestContext) -> Request:
        model = body["model"]
        counter = counter_for(
            self.upstream.provider_model(model), self.settings.context.token_counting
        )
        system, conversation = split_system(body["messages"])
        validate_messages(system)
        ratio = context.budget_ratio or self.settings.context.budget_ratio
        key = (
            (self.tenant(context.authorization), context.session_id) if context.session_id else None
        )
        return Request(
            model=model,
            counter=counter,
            budget=self.budgets.budget(model, body, ratio),
            input_limit=self.upstream.limits(model).max_input_tokens,
            messages=body["messages"],
            system=system,
            conversation=conversation,
            system_tokens=self._counts.messages(counter, system),
            tools_tokens=self._counts.tools(counter, body.get("tools")),
            mode=context.mode,
            key=key,
            size=len(context.body) if context.body else None,
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
        counts = await _off_loop(
            conversation, lambda: [request.counter.count_message(m) for m in conversation]
        )
        plan = self._fit(request, conversation, counts, None, allow_summary=False)
        original = base + sum(counts)
        return Turn(
            body | {"messages": plan.messages},
            request.model,
            managed=True,
            tokens_original=original,
            tokens_sent=plan.tokens,
            compression=plan.compression,
            input_limit=request.input_limit,
        )

    # -- reconcile and count ------------------------------------------------------------

    async def _state(self, request: Request) -> State:
        """Load the meta, reconcile, validate and count the new messages; recount from the
        stored messages only after an edit of history or for a tokenizer new to it."""
        assert request.key is not None
        conversation, counter = request.conversation, request.counter
        meta = await self.store.load(*request.key)
        serialized = None
        if conversation and request.mode != "append" and meta is not None and meta.length:
            serialized = Serialized(request.messages, len(request.system))
            await pause(len(serialized))
        trusted = 0
        fingerprint = meta.fingerprint if meta is not None else None
        if (
            serialized is not None
            and fingerprint is not None
            and len(conversation) >= fingerprint.count
            and serialized.starts_with(fingerprint)
        ):
            trusted = fingerprint.count
        unseen = conversation[trusted:]
        offset = len(request.system)

        def reconciled(stored: list[str] | None = None) -> Match | str:
            validate_messages(conversation, trusted, offset=offset)
            return reconcile(meta, conversation, request.mode, serialized, stored)

        stored: list[StoredMessage] | None = None
        match = await _off_loop(unseen, reconciled, request.size)
        if match == NEED_STORED_HASHES:
            assert meta is not None
            stored = await self.store.messages(*request.key, 0, min(len(conversation), meta.length))
            hashes = [s.hash for s in stored]
            match = await _off_loop(unseen, lambda: reconciled(hashes), request.size)
        assert isinstance(match, Match)
        if match.kind != "append" and serialized is None and conversation:
            serialized = Serialized(request.messages, len(request.system))
            await pause(len(serialized))
        names = {counter.name, *(meta.totals if meta else ())}
        totals, checkpoint, checkpoints = self._carried(meta, match, counter.name)
        if totals is None:  # an edit of history, or a tokenizer new to the session
            assert meta is not None
            totals, checkpoint, checkpoints = await self._recounted(
                request, meta, match, names, stored
            )
        new_messages = conversation[match.start :]
        counters = [counter_for_name(name, counter) for name in names]
        new = await _off_loop(
            new_messages, lambda: _entries(new_messages, match, counters), request.size
        )
        for stored_message in new:
            for name in totals:
                totals[name] += stored_message.tokens[name]
        return State(
            base=meta,
            match=match,
            new=new,
            totals=totals,
            checkpoint=checkpoint,
            checkpoints=checkpoints,
            expected=meta.version if meta else 0,
            serialized=serialized,
        )

    def _carried(
        self, meta: SessionMeta | None, match: Match, name: str
    ) -> tuple[dict[str, int] | None, Checkpoint | None, int]:
        """Totals and the summary in effect, from the meta alone; None for the totals when
        the stored messages must be counted (`_recounted`)."""
        if meta is None or match.keep == 0:
            return {name: 0}, None, 0
        checkpoint = meta.checkpoint
        if match.keep < meta.length or name not in meta.totals:
            return None, checkpoint, meta.checkpoints
        if checkpoint is not None and name not in checkpoint.before:
            return None, checkpoint, meta.checkpoints
        return dict(meta.totals), checkpoint, meta.checkpoints

    async def _recounted(
        self,
        request: Request,
        meta: SessionMeta,
        match: Match,
        names: set[str],
        stored: list[StoredMessage] | None,
    ) -> tuple[dict[str, int], Checkpoint | None, int]:
        """Totals and the summary in effect after an edit of history (the transcript cut
        to `match.keep`) or for a tokenizer new to the session: the slow path, which reads
        the kept messages once."""
        assert request.key is not None
        keep = match.keep
        if stored is None or len(stored) < keep:
            stored = await self.store.messages(*request.key, 0, keep)
        kept = stored[:keep]
        await self._fill(kept, names, request.counter)
        checkpoint, count = meta.checkpoint, meta.checkpoints
        if keep < meta.length:  # summaries of what was cut away no longer apply
            valid = [
                c for c in await self.store.checkpoints(*request.key) if c.covers_until <= keep
            ]
            checkpoint, count = (valid[-1] if valid else None), len(valid)
        if checkpoint is not None:
            before = {n: sum(s.tokens[n] for s in kept[: checkpoint.covers_until]) for n in names}
            checkpoint = replace(checkpoint, before=before)
        return {n: sum(s.tokens[n] for s in kept) for n in names}, checkpoint, count

    async def _fill(
        self, entries: list[StoredMessage], names: set[str], counter: TokenCounter
    ) -> None:
        """Add missing counts (messages stored before a tokenizer was used on them)."""
        missing = [(s, n) for s in entries for n in names if n not in s.tokens]
        if not missing:
            return

        def count() -> None:
            for stored, name in missing:
                named = counter_for_name(name, counter)
                stored.tokens[name] = self._counts.message(named, stored.message, stored.hash)

        await _off_loop([stored.message for stored, _ in missing], count)

    # -- planning and summaries ---------------------------------------------------------

    async def _plan(self, request: Request, state: State, *, allow_summary: bool) -> Plan:
        """The messages to send. Within budget (known from the totals) that is everything
        after the summary; over it, the pure planner decides on the window's counts."""
        checkpoint = state.checkpoint
        covers = checkpoint.covers_until if checkpoint else 0
        name = request.counter.name
        head = [summary_message(checkpoint.text)] if checkpoint else []
        head_tokens = self._summary_tokens(request.counter, checkpoint)
        window = state.totals[name] - (checkpoint.before[name] if checkpoint else 0)
        total = request.system_tokens + request.tools_tokens + head_tokens + window
        if total <= request.budget:
            if state.match.whole:
                recent = request.conversation[covers:]
            else:
                recent = [s.message for s in await self._window(request, state, covers)]
            compression = "summary" if checkpoint else "none"
            return Plan([*request.system, *head, *recent], total, compression, None, 0)
        entries = await self._window(request, state, covers)
        await self._fill(entries, {name}, request.counter)
        plan = self._fit(
            request,
            [s.message for s in entries],
            [s.tokens[name] for s in entries],
            checkpoint,
            allow_summary=allow_summary,
        )
        if plan.summarize is None:
            return plan
        start, end = plan.summarize
        return replace(plan, summarize=(covers + start, covers + end))

    def _fit(
        self,
        request: Request,
        messages: list[dict[str, Any]],
        counts: list[int],
        checkpoint: Checkpoint | None,
        *,
        allow_summary: bool,
        budget: int | None = None,
    ) -> Plan:
        try:
            return plan_context(
                system=request.system,
                transcript=messages,
                transcript_tokens=counts,
                summary=checkpoint.text if checkpoint else None,
                summary_covers=0,
                budget=budget or request.budget,
                counter=request.counter,
                tools_tokens=request.tools_tokens,
                keep_recent_ratio=self.settings.context.keep_recent_ratio,
                allow_summary=allow_summary,
                system_tokens=request.system_tokens,
            )
        except ContextOverflowError as exc:
            raise ProxyError(
                400,
                f"This model's context budget is {request.budget} tokens; {exc}.",
                code="context_length_exceeded",
                param="messages",
            ) from None

    async def _window(self, request: Request, state: State, start: int) -> list[StoredMessage]:
        """transcript[start:] as this request leaves it: stored messages, then new ones."""
        assert request.key is not None
        stored = []
        if start < state.keep:
            stored = await self.store.messages(*request.key, start, state.keep)
        return [*stored, *state.new[max(0, start - state.keep) :]]

    async def _summarized(
        self, request: Request, state: State, span: tuple[int, int]
    ) -> tuple[State, Plan]:
        """Fold `span` into the summary, then plan again; truncation if that fails."""
        assert request.key is not None
        if self.summaries.running(request.key) is not None:  # one is on its way: wait for it
            await self.summaries.wait(request.key)
            state = await self._state(request)
            plan = await self._plan(request, state, allow_summary=True)
            if plan.summarize is None:
                return state, plan
            span = plan.summarize
        start, end = span
        entries = await self._window(request, state, start)
        entries = entries[: end - start]
        await self._fill(entries, set(state.totals), request.counter)
        try:
            checkpoint = await asyncio.wait_for(
                self.summaries.make(
                    entries, end, state.checkpoint, request.model, request.budget, "sync"
                ),
                self.settings.context.summary_timeout_seconds,
            )
        except (SummarizationError, ProxyError, TimeoutError) as exc:
            logger.warning("summarization failed, truncating instead: %s", exc)
            return state, await self._plan(request, state, allow_summary=False)
        state = await self._adopt(request, state, checkpoint)
        return state, await self._plan(request, state, allow_summary=False)

    async def _adopt(self, request: Request, state: State, checkpoint: Checkpoint) -> State:
        """Put a new summary in effect: stored now if it covers stored messages only
        (then a failed upstream call does not waste it), else with the turn."""
        assert request.key is not None
        adopted = replace(state, checkpoint=checkpoint, checkpoints=state.checkpoints + 1)
        if checkpoint.covers_until > state.keep:
            return replace(adopted, pending=checkpoint)
        stored = await self.summaries.store(request.key, checkpoint)
        base = state.base
        if (
            stored is not None
            and base is not None
            and (stored.head, stored.length) == (base.head, base.length)
            and state.keep == base.length
        ):
            return replace(adopted, expected=stored.version)
        return adopted  # the turn's commit will meet a newer version and replay

    def _maybe_summarize(self, request: Request, meta: SessionMeta) -> None:
        """After a reply: once the session passes `summarize_at` of its budget, make the
        next summary in the background so the next request finds it ready.

        The plan is made as if the budget were `summarize_at` of it: the fold leaves
        `keep_recent_ratio` of that smaller budget, so the summary plus what stays
        verbatim lands well under the trigger and the next fold is several turns away
        (keeping the prefix stable for prompt caches)."""
        assert request.key is not None
        name, checkpoint = request.counter.name, meta.checkpoint
        head = (
            self._counts.message(
                request.counter,
                summary_message(checkpoint.text),
                "summary:" + checkpoint.chain_hash,
            )
            if checkpoint
            else 0
        )
        window = meta.totals[name] - (checkpoint.before.get(name, 0) if checkpoint else 0)
        trigger = self.settings.context.summarize_at * request.budget
        if request.system_tokens + request.tools_tokens + head + window <= trigger:
            return
        self.summaries.schedule(request.key, lambda: self._background(request, int(trigger)))

    async def _background(self, request: Request, budget: int) -> None:
        assert request.key is not None
        meta = await self.store.load(*request.key)
        name = request.counter.name
        if meta is None or name not in meta.totals:
            return
        checkpoint = meta.checkpoint
        covers = checkpoint.covers_until if checkpoint else 0
        entries = await self.store.messages(*request.key, covers, meta.length)
        await self._fill(entries, set(meta.totals) | {name}, request.counter)
        plan = self._fit(
            request,
            [s.message for s in entries],
            [s.tokens[name] for s in entries],
            checkpoint,
            allow_summary=True,
            budget=budget,
        )
        if plan.summarize is None:
            return
        start, end = plan.summarize
        made = await self.summaries.make(
            entries[start:end],
            covers + end,
            checkpoint,
            request.model,
            request.budget,
            "background",
        )
        await self.summaries.store(request.key, made)

    # -- results ------------------------------------------------------------------------

    def _summary_tokens(self, counter: TokenCounter, checkpoint: Checkpoint | None) -> int:
        if checkpoint is None:
            return 0
        key = f"summary:{checkpoint.chain_hash}:{checkpoint.created}"
        return self._counts.message(counter, summary_message(checkpoint.text), key)

    def _turn(self, body: dict[str, Any], request: Request, state: State, plan: Plan) -> Turn:
        checkpoint = state.checkpoint
        summarized = checkpoint is not None and plan.compression == "summary"
        history = state.totals[request.counter.name]
        unchanged = (
            plan.compression == "none"
            and state.match.whole
            and state.serialized is not None
            and len(plan.messages) == len(request.system) + len(request.conversation)
        )
        return Turn(
            body | {"messages": plan.messages},
            request.model,
            managed=True,
            key=request.key,
            tokens_original=request.system_tokens + request.tools_tokens + history,
            tokens_sent=plan.tokens,
            compression=plan.compression,
            summary_created=checkpoint.created if summarized and checkpoint else None,
            input_limit=request.input_limit,
            request=request,
            state=state,
            messages_json=state.serialized.whole if unchanged and state.serialized else None,
        )

    def _entry(
        self, reply: dict[str, Any], previous: str, counter: TokenCounter, totals: dict[str, int]
    ) -> StoredMessage:
        digest = message_hash(reply)
        counts = {name: counter_for_name(name, counter).count_message(reply) for name in totals}
        return StoredMessage(reply, digest, chain([digest], start=previous)[0], counts)

    def _after(
        self, request: Request, state: State, reply: StoredMessage
    ) -> tuple[SessionMeta, tuple[Checkpoint, ...]]:
        """The meta once the turn is stored, and the checkpoint stored with it (if any)."""
        assert request.key is not None
        base, match = state.base, state.match
        now = time.time()
        fingerprint = None
        if match.whole and request.conversation and state.serialized is not None:
            head = state.new[-1].chain if state.new else match.head
            fingerprint = state.serialized.fingerprint(len(request.conversation), head)
        if base is not None and match.keep:
            first = base.first
        else:
            first = state.new[0].hash if state.new else reply.hash
        meta = SessionMeta(
            tenant=request.key[0],
            session_id=request.key[1],
            version=state.expected + 1,
            length=state.length + 1,
            head=reply.chain,
            first=first,
            totals={name: total + reply.tokens[name] for name, total in state.totals.items()},
            checkpoint=state.checkpoint,
            checkpoints=state.checkpoints,
            fingerprint=fingerprint,
            tail=(reply.hash,) if fingerprint is not None else (),
            created=base.created if base is not None and base.created else now,
            updated=now,
        )
        return meta, (state.pending,) if state.pending is not None else ()


def counter_for_name(name: str, counter: TokenCounter) -> TokenCounter:
    """The counter a stored count was made with (by its name)."""
    return counter if counter.name == name else counter_named(name)


def _entries(
    messages: list[dict[str, Any]], match: Match, counters: list[TokenCounter]
) -> tuple[StoredMessage, ...]:
    """The new messages as stored: hash, chain value, a count per tokenizer."""
    heads = chain(match.hashes, start=match.head)
    return tuple(
        StoredMessage(message, digest, head, {c.name: c.count_message(message) for c in counters})
        for message, digest, head in zip(messages, match.hashes, heads, strict=True)
    )


async def pause(size: int) -> None:
    """Let other requests run between two passes over a large body (each pass is one C
    call that holds the event loop for its whole length)."""
    if size > _PAUSE_BYTES:
        await asyncio.sleep(0)


def _token_bound(body: bytes) -> int:
    """At least as many tokens as the body's messages hold: every counter here makes at
    most one token of each byte of text, a message's JSON is longer than its overhead,
    and an image part (counted flat) appears as "image_url" twice (type and key)."""
    return len(body) + IMAGE_TOKENS * body.count(b'"image_url"')


async def _off_loop(messages: list[Any], work: Any, body: int | None = None) -> Any:
    """Run `work` (Python work on `messages`) here, or in a worker thread when they are
    many or large: there the interpreter switches to the event loop every few ms.
    `body`, the size of the request they came in, spares measuring them when small."""
    if len(messages) > _OFF_LOOP_MESSAGES:
        return await asyncio.to_thread(work)
    if body is not None and body <= _OFF_LOOP_CHARS:
        return work()
    size = sum(len(str(m.get("content") or "")) for m in messages if isinstance(m, dict))
    if size > _OFF_LOOP_CHARS:
        return await asyncio.to_thread(work)
    return work()
