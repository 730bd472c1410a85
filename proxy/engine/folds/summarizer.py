"""Summary checkpoints made (a model call, measured) and stored, the background ones one per
session at a time across processes, so replicas never make one twice."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from proxy.concurrency import off_loop
from proxy.config.settings import Settings
from proxy.conversation.identity import GENESIS, Message
from proxy.conversation.tokens import counter_for_model
from proxy.costs.prices import Prices
from proxy.costs.usage import Usage, usage_of
from proxy.engine.folds.breaker import Breaker
from proxy.engine.folds.continuing import Continuation
from proxy.facts.ledger import Fact, facts_in, merge, message_text, pinned, stated_text
from proxy.observability import metrics
from proxy.observability.metrics import ModelLabels
from proxy.recall.index import segment
from proxy.sessions.records import (
    CAS_ATTEMPTS,
    Checkpoint,
    Commit,
    SessionKey,
    SessionMeta,
    StoredMessage,
)
from proxy.sessions.store import SessionStore
from proxy.summary.fold import SummarizationError, summarize_span
from proxy.upstream.client import Upstream

__all__ = ["Bill", "Summaries"]

logger = logging.getLogger("context_proxy.summaries")

_AGENT_CONTEXT = re.compile(
    r"<system-reminder>.*?</system-reminder>"  # Claude Code: CLAUDE.md, the date
    r"|<environment_context>.*?</environment_context>"  # Codex: cwd, shell, date
    r"|# AGENTS\.md instructions for [^\n]*\n\n<INSTRUCTIONS>.*?</INSTRUCTIONS>"  # Codex
    r"|<user_instructions>.*?</user_instructions>",  # older Codex: AGENTS.md
    re.DOTALL,
)
"""Context an agent sends inside its first user message: not said by anyone, and read by
the model as standing instructions, like the system prompt."""


@dataclass
class Bill:
    """What a summary's model calls used and cost, filled call by call so a summary that
    failed half way is paid for too; `usd` is None while any call's price is unknown."""

    usage: Usage | None = None
    usd: float | None = 0.0
    calls: int = 0

    def add(self, usage: Usage | None, prices: Prices | None) -> None:
        self.calls += 1
        if usage is not None:
            self.usage = usage if self.usage is None else self.usage + usage
        if prices is None or usage is None or self.usd is None:
            self.usd = None
        else:
            self.usd += prices.cost(usage)

    @property
    def charge(self) -> float:
        """The dollars to charge (0 for calls with no known price: never guessed)."""
        return self.usd or 0.0


class Summaries:
    def __init__(
        self,
        *,
        settings: Settings,
        upstream: Upstream,
        store: SessionStore,
        labels: ModelLabels,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._clock = clock  # the breakers' (`Breaker`)
        self._wall_clock = wall_clock  # when a summary was made, and its meta stored
        self._upstream = upstream
        self._store = store
        self._label = labels
        self._running: dict[SessionKey, asyncio.Task[None]] = {}
        self._breakers: dict[str, Breaker] = {}

    def model_for(self, model: str) -> str:
        """The model that summarizes `model`'s sessions."""
        return self._settings.context.summary_model or model

    def breaker(self, model: str) -> Breaker:
        """The circuit breaker of the model that summarizes `model`'s sessions."""
        label = self._label(self.model_for(model))
        found = self._breakers.get(label)
        if found is None:
            context = self._settings.context
            found = Breaker(
                label=label,
                failures=context.summary_breaker_failures,
                backoff=context.summary_backoff_seconds,
                clock=self._clock,
            )
            self._breakers[label] = found
        return found

    async def make(
        self,
        span: Sequence[StoredMessage],
        end: int,
        previous: Checkpoint | None,
        model: str,
        room: int,
        mode: Literal["sync", "background"],
        api_key: str | None = None,
        ledger: Sequence[Fact] = (),
        query: str = "",
        bill: Bill | None = None,
        continuation: Continuation | None = None,
    ) -> Checkpoint:
        """Fold `span` (transcript[previous.covers_until:end]) into the next summary checkpoint,
        with its recall index and facts ledger, each model call's usage and price on `bill`;
        `continuation`, where given, asks for it as the session's last prompt's next turn."""
        context = self._settings.context
        messages = [stored.message for stored in span]
        follows = previous.chain_hash if previous else GENESIS
        work = functools.partial(_archived, messages, end - len(span), follows, ledger)
        index, facts, said = await off_loop(messages, work)
        summary_model = self.model_for(model)
        counter = counter_for_model(
            self._upstream.models.provider_model(summary_model), context.token_counting
        )
        # At most half of `room` (what the budget leaves beside system, tools and the
        # messages the fold keeps verbatim), and `max_summary_tokens`: the summary fits.
        share = math.floor(room / 2)
        max_summary = max(32, min(context.max_summary_tokens, share))
        limit = self._upstream.models.limits(summary_model).max_input_tokens
        label = self._label(summary_model)
        breaker = self.breaker(model)
        if not breaker.allow():
            raise SummarizationError("the summarizer failed repeatedly; its breaker is open")
        started = time.perf_counter()
        outcome = "error"
        bill = bill if bill is not None else Bill()
        prices = self._upstream.models.limits(summary_model).prices
        calls = bill.calls

        def billed(reported: dict[str, Any] | None) -> Usage | None:
            used = usage_of(reported)
            bill.add(used, prices)
            if used is not None:
                metrics.SUMMARIZATION_TOKENS.labels(label, "cached").inc(used.cache_read)
                metrics.SUMMARIZATION_TOKENS.labels(label, "cache_write").inc(used.cache_write)
            return used

        async def complete(model: str, prompt: list[Message], max_tokens: int) -> str:
            text, reported = await self._upstream.complete_text(
                model, prompt, max_tokens, api_key=api_key
            )
            billed(reported)
            return text

        async def continued(task: str, max_tokens: int) -> tuple[str, int]:
            assert continuation is not None
            text, reported = await continuation(task, max_tokens)
            used = billed(reported)
            return text, used.prompt if used is not None else 0

        try:
            result = await summarize_span(
                previous=previous.segments if previous else (),
                span=messages,
                complete=complete,
                model=summary_model,
                counter=counter,
                budget_tokens=math.floor(context.budget_ratio * limit) - max_summary,
                max_summary_tokens=max_summary,
                pin=pinned(facts, query, counter.count_text, max_summary // 4)
                if context.pin_facts
                else lambda _: [],
                facts=said,
                segments=context.summary_segments,
                continuation=continued if continuation is not None else None,
            )
            outcome = "success"
        except asyncio.CancelledError:
            outcome = "timeout"
            raise
        finally:
            if outcome == "success":
                breaker.succeeded()
            else:
                breaker.failed()
            metrics.SUMMARIZATIONS.labels(label, outcome, mode).inc()
            metrics.SUMMARIZATION_DURATION.labels(label, mode).observe(
                time.perf_counter() - started
            )
        metrics.SUMMARIZATION_TOKENS.labels(label, "input").inc(result.input_tokens)
        metrics.SUMMARIZATION_TOKENS.labels(label, "output").inc(
            counter.count_text(result.raw_text)
        )
        metrics.FACT_RETENTION.labels(label).observe(result.retention)
        # Tokens before the new end, for every tokenizer that counted the whole prefix.
        names = set.intersection(*(set(stored.tokens) for stored in span))
        if previous is not None:
            names &= set(previous.before)
        before = {
            name: (previous.before[name] if previous else 0) + sum(s.tokens[name] for s in span)
            for name in names
        }
        return Checkpoint(
            covers_until=end,
            chain_hash=span[-1].chain,
            segments=result.segments,
            pinned=tuple(result.pinned),
            kept=_kept_after(previous, messages, end),
            tokens=counter.count_text(result.text),
            model=summary_model,
            created=self._wall_clock(),
            before=before,
            index=index,
            ledger=facts,
            usage=bill.usage if bill.calls > calls else None,
        )

    async def chapter(
        self,
        span: Sequence[StoredMessage],
        end: int,
        previous: Checkpoint | None,
        before: dict[str, int],
        ledger: Sequence[Fact] = (),
    ) -> Checkpoint:
        """A checkpoint with no summary that covers transcript[:end], the conversation a
        client replaced with its own summary, archived for recall as a fold's span is."""
        messages = [stored.message for stored in span]
        follows = previous.chain_hash if previous else GENESIS
        work = functools.partial(_archived, messages, end - len(span), follows, ledger)
        index, facts, _ = await off_loop(messages, work)
        return Checkpoint(
            covers_until=end,
            chain_hash=span[-1].chain if span else follows,
            segments=(),
            tokens=0,
            model="",
            created=self._wall_clock(),
            before=dict(before),
            index=index,
            ledger=facts,
        )

    def failed(self, model: str, mode: Literal["sync", "background"]) -> None:
        """Count a summary that failed before its model was called."""
        summary_model = self.model_for(model)
        metrics.SUMMARIZATIONS.labels(self._label(summary_model), "error", mode).inc()

    async def store(
        self, key: SessionKey, checkpoint: Checkpoint | None, owed: float = 0.0
    ) -> SessionMeta | None:
        """Add `checkpoint` if it still summarizes a prefix of the stored transcript and is the
        newest (the stored meta, else None); `owed` dollars go to the next turn either way."""
        for _ in range(CAS_ATTEMPTS):
            meta = await self._store.load(*key)
            if meta is None:
                return None
            applies = checkpoint is not None and await self._applies(key, meta, checkpoint)
            if not applies and not owed:
                return None
            changes: dict[str, Any] = {"version": meta.version + 1}
            if owed:
                changes["receipt"] = meta.receipt.owing(owed)
            if applies and checkpoint is not None:
                changes |= {"checkpoint": checkpoint, "checkpoints": meta.checkpoints + 1}
                changes["updated"] = self._wall_clock()
            updated = meta.evolve(**changes)
            stored = (checkpoint,) if applies and checkpoint is not None else ()
            if await self._store.commit(Commit(updated, meta.version, meta.length, (), stored)):
                return updated if applies else None
        return None

    async def _applies(self, key: SessionKey, meta: SessionMeta, checkpoint: Checkpoint) -> bool:
        end = checkpoint.covers_until
        latest = meta.checkpoint.covers_until if meta.checkpoint else 0
        if not latest < end <= meta.length:
            return False
        if end == meta.length:
            return meta.head == checkpoint.chain_hash
        last = await self._store.messages(*key, end - 1, end)
        return last[0].chain == checkpoint.chain_hash

    def running(self, key: SessionKey) -> asyncio.Task[None] | None:
        return self._running.get(key)

    async def wait(self, key: SessionKey) -> None:
        """Wait (bounded by the summary timeout) for a background summary of `key`."""
        task = self._running.get(key)
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    asyncio.shield(task), self._settings.context.summary_timeout_seconds
                )

    def redact(self, text: str, extra: Sequence[str] = ()) -> str:
        """`text` fit for a log line: no credential in it (see `proxy.observability.redaction`)."""
        return self._upstream.redact(text, extra)

    def schedule(
        self, key: SessionKey, job: Callable[[], Awaitable[None]], secrets: Sequence[str] = ()
    ) -> None:
        """Run `job` in the background unless one already runs for this session, here or (under
        the store's lock) in another process; a failure is logged without `secrets`."""
        if key in self._running:
            return

        async def run() -> None:
            lease = 2 * self._settings.context.summary_timeout_seconds
            try:
                token = await self._store.try_lock(*key, lease, name="summary")
            except Exception as exc:
                logger.warning("background summarization not started: %s", self.redact(str(exc)))
                token = None
            if token is None:
                self._running.pop(key, None)
                return
            try:
                await job()
            except Exception as exc:  # the next request falls back; never store an error
                reason = self.redact(str(exc), secrets)
                logger.warning("background summarization failed: %s", reason)
            finally:
                self._running.pop(key, None)
                with contextlib.suppress(Exception):
                    await self._store.unlock(*key, token, name="summary")

        # Counted from now to its end, however it ends (even cancelled before it starts):
        # while the gauge is above zero, the session's next turn may find a summary made.
        task = asyncio.get_running_loop().create_task(run())
        metrics.BACKGROUND_TASKS.inc()
        task.add_done_callback(lambda _: metrics.BACKGROUND_TASKS.dec())
        self._running[key] = task

    async def close(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)


def _kept(first: Message | None) -> tuple[str, ...]:
    """The agent context blocks of the conversation's first message, if a user's."""
    if first is None or first.get("role") != "user":
        return ()
    return tuple(_AGENT_CONTEXT.findall(message_text(first)))


def _kept_after(previous: Checkpoint | None, span: list[Message], end: int) -> tuple[str, ...]:
    """The agent context a new summary keeps: its predecessor's, or that of the first
    message it folds when that starts the conversation (or a client's new chapter)."""
    if previous is not None and previous.text:
        return previous.kept
    return _kept(span[0] if previous is not None or end == len(span) else None)


def _archived(
    messages: list[Message], start: int, follows: str, ledger: Sequence[Fact]
) -> tuple[dict[str, Any], tuple[Fact, ...], list[str]]:
    """A fold's archive: the recall index of its span, the ledger with its facts, and
    their values (the summarizer's retention is measured on them)."""
    now = time.time()
    said = [
        (fact, message.get("role") == "assistant")
        for offset, message in enumerate(messages)
        for fact in facts_in(stated_text(message), start + offset, now)
    ]
    facts = [fact for fact, _ in said]
    stated = [(fact.source, fact.subject) for fact in facts]  # what each message states
    # The user's words, read for subjects named again beside a value not read as theirs.
    users = [
        (start + offset, stated_text(message))
        for offset, message in enumerate(messages)
        if message.get("role") == "user"
    ]
    heard = [fact for fact, heard in said if heard]
    return (
        segment(start, messages, follows, stated),
        tuple(merge(ledger, facts, heard, users)),
        [f.value for f in facts],
    )
