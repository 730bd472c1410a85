"""Planning a request's window around the pure planner (`proxy.engine.window`).

Within budget, known from the session's token totals, the plan is everything after the
summary, with no message read or counted. Over it, the window's counts go to the pure
planner; a summary it asks for is made now (or awaited from the background), and after a
reply that passes `summarize_at`, the next one is made in the background. A summary
freezes stubs of the large tool results it leaves in the window, sent in their place
until the next one (`proxy.engine.stubs`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import replace

from proxy.config.settings import Settings
from proxy.conversation.identity import Message
from proxy.conversation.tokens import CountCache, TokenCounter
from proxy.engine.archive import Archive
from proxy.engine.history import History, off_loop
from proxy.engine.stubs import Stubs
from proxy.engine.summarizer import Summaries
from proxy.engine.types import Request, State
from proxy.engine.window import Plan, plan_context
from proxy.errors import ContextOverflow, ProxyError
from proxy.facts.ledger import recent_text
from proxy.sessions.records import Checkpoint, SessionKey, SessionMeta, StoredMessage
from proxy.sessions.store import SessionStore
from proxy.summary.fold import SummarizationError
from proxy.summary.message import PINNED_LABEL, summary_message

__all__ = ["Planning"]

logger = logging.getLogger("context_proxy.engine")


class Planning:
    def __init__(
        self,
        settings: Settings,
        store: SessionStore,
        history: History,
        summaries: Summaries,
        counts: CountCache,
        archive: Archive,
    ) -> None:
        self._settings = settings
        self._store = store
        self._history = history
        self._summaries = summaries
        self._counts = counts
        self._archive = archive
        self.stubs = Stubs(settings.context, counts)

    async def plan(self, request: Request, state: State, *, allow_summary: bool) -> Plan:
        """The messages to send. Within budget (known from the totals) that is everything
        after the summary; over it, the pure planner decides on the window's counts."""
        checkpoint = state.checkpoint
        covers = checkpoint.covers_until if checkpoint else 0
        name = request.counter.name
        speaks = checkpoint is not None and bool(checkpoint.text)
        head = [summary_message(checkpoint.text, checkpoint.kept)] if checkpoint and speaks else []
        head_tokens = self.summary_tokens(request.counter, checkpoint)
        window = state.totals[name] - (checkpoint.before[name] if checkpoint else 0)
        window -= self.stubs.saved(checkpoint, name)
        total = request.system_tokens + request.tools_tokens + head_tokens + window
        whole = (
            request.system_tokens
            + request.tools_tokens
            + state.totals[name]
            - state.before_origin(name)
        )
        if speaks and whole <= min(total, request.budget):
            # The summary costs more than what it covers: send the conversation as it is.
            checkpoint, covers, head, total = None, state.origin, [], whole
        if total <= request.budget:
            if state.match.whole and covers >= state.origin:
                recent = request.conversation[covers - state.origin :]
            else:
                recent = [s.message for s in await self._history.window(request, state, covers)]
            recent = self.stubs.sent(recent, checkpoint)
            return Plan(
                [*request.system, *head, *recent], total, "summary" if head else "none", None, 0
            )
        entries = await self._history.window(request, state, covers)
        entries = await self._history.counted(entries, {name}, request.counter)
        entries = self.stubs.counted(entries, checkpoint, request.counter)
        plan = await self._fitted(request, entries, checkpoint, allow_summary=allow_summary)
        if plan.summarize is None:
            return plan
        start, end = plan.summarize
        return replace(plan, summarize=(covers + start, covers + end))

    async def _fitted(
        self,
        request: Request,
        entries: list[StoredMessage],
        checkpoint: Checkpoint | None,
        *,
        allow_summary: bool,
        budget: int | None = None,
    ) -> Plan:
        """`fit` for stored entries (counted by the request's tokenizer), off the loop
        when they are long: cutting a long paste is seconds of counting."""
        messages = [s.message for s in entries]
        counts = [s.tokens[request.counter.name] for s in entries]
        fit = functools.partial(
            self.fit,
            request,
            messages,
            counts,
            checkpoint,
            allow_summary=allow_summary,
            budget=budget,
        )
        return await off_loop(messages, fit)

    def fit(
        self,
        request: Request,
        messages: list[Message],
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
                summary=checkpoint.text if checkpoint and checkpoint.text else None,
                summary_covers=0,
                budget=budget or request.budget,
                counter=request.counter,
                tools_tokens=request.tools_tokens,
                keep_recent_ratio=self._settings.context.keep_recent_ratio,
                allow_summary=allow_summary,
                system_tokens=request.system_tokens,
                kept=checkpoint.kept if checkpoint else (),
            )
        except ContextOverflow as exc:
            raise ContextOverflow(
                f"This model's context budget is {request.budget} tokens; {exc}.", param="messages"
            ) from None

    async def summarized(
        self, request: Request, state: State, span: tuple[int, int]
    ) -> tuple[State, Plan]:
        """Fold `span` into the summary, then plan again; truncation if that fails. A
        background summary on its way is waited for, and one that landed since the state
        was read is used, never made again."""
        assert request.key is not None
        if self._summaries.running(request.key) is not None:  # one is on its way: wait for it
            await self._summaries.wait(request.key)
        if await self._changed(request.key, state):
            state = await self._history.state(request)
            plan = await self.plan(request, state, allow_summary=True)
            if plan.summarize is None:
                return state, plan
            span = plan.summarize
        start, end = span
        window = await self._history.window(request, state, start)
        window = await self._history.counted(window, set(state.totals), request.counter)
        archived = await self._archive.of(request.key, state.checkpoints, state.checkpoint)
        try:
            checkpoint = await asyncio.wait_for(
                self._summaries.make(
                    window[: end - start],
                    end,
                    state.checkpoint,
                    request.model,
                    request.budget - request.system_tokens - request.tools_tokens,
                    "sync",
                    request.provider_key,
                    archived.ledger,
                    recent_text(request.conversation),
                ),
                self._settings.context.summary_timeout_seconds,
            )
        except (SummarizationError, ProxyError, TimeoutError) as exc:
            reason = self._summaries.redact(str(exc), request.secrets)
            logger.warning("summarization failed, truncating instead: %s", reason)
            return state, await self.plan(request, state, allow_summary=False)
        checkpoint = await self._frozen(
            request, checkpoint, state.checkpoint, window[end - start :]
        )
        state = await self._adopt(request, state, checkpoint)
        return state, await self.plan(request, state, allow_summary=False)

    async def _changed(self, key: SessionKey, state: State) -> bool:
        """The stored session changed since `state` was read: under the turn lock, only a
        background summary (here or in another replica) can have been stored."""
        meta = await self._store.load(*key)
        return (meta.version if meta is not None else 0) != state.expected

    async def _adopt(self, request: Request, state: State, checkpoint: Checkpoint) -> State:
        """Put a new summary in effect: stored now if it covers stored messages only
        (then a failed upstream call does not waste it), else with the turn."""
        assert request.key is not None
        adopted = replace(state, checkpoint=checkpoint, checkpoints=state.checkpoints + 1)
        if checkpoint.covers_until > state.keep:
            return replace(adopted, pending=checkpoint)
        stored = await self._summaries.store(request.key, checkpoint)
        base = state.base
        if (
            stored is not None
            and base is not None
            and (stored.head, stored.length) == (base.head, base.length)
            and state.keep == base.length
        ):
            return replace(adopted, expected=stored.version)
        return adopted  # the turn's commit will meet a newer version and replay

    def maybe_summarize(self, request: Request, meta: SessionMeta) -> None:
        """After a reply: once the session passes `summarize_at` of its budget, make the
        next summary in the background so the next request finds it ready.

        Only what can be compressed counts: the trigger is `summarize_at` of what system
        messages and tools leave of the budget. The plan is made as if the budget ended
        at the trigger: the fold leaves `keep_recent_ratio` of that smaller room, so the
        summary plus what stays verbatim lands well under the trigger and the next fold
        is several turns away (keeping the prefix stable for prompt caches)."""
        assert request.key is not None
        name, checkpoint = request.counter.name, meta.checkpoint
        head = self.summary_tokens(request.counter, checkpoint)
        window = meta.totals[name] - (checkpoint.before.get(name, 0) if checkpoint else 0)
        window -= self.stubs.saved(checkpoint, name)
        base = request.system_tokens + request.tools_tokens
        trigger = base + self._settings.context.summarize_at * (request.budget - base)
        if base + head + window <= trigger or self._summaries.breaker(request.model).open:
            return
        job = functools.partial(self._background, request, int(trigger))
        self._summaries.schedule(request.key, job, request.secrets)

    async def _background(self, request: Request, budget: int) -> None:
        assert request.key is not None
        meta = await self._store.load(*request.key)
        name = request.counter.name
        if meta is None or name not in meta.totals:
            return
        checkpoint = meta.checkpoint
        covers = checkpoint.covers_until if checkpoint else 0
        entries = await self._store.messages(*request.key, covers, meta.length)
        entries = await self._history.counted(entries, set(meta.totals) | {name}, request.counter)
        try:
            plan = await self._fitted(
                request,
                self.stubs.counted(entries, checkpoint, request.counter),
                checkpoint,
                allow_summary=True,
                budget=budget,
            )
        except ProxyError:  # no plan at all: a summary that failed before it began
            self._summaries.failed(request.model, "background")
            raise
        if plan.summarize is None:
            return
        start, end = plan.summarize
        archived = await self._archive.of(request.key, meta.checkpoints, checkpoint)
        made = await self._summaries.make(
            entries[start:end],
            covers + end,
            checkpoint,
            request.model,
            request.budget - request.system_tokens - request.tools_tokens,
            "background",
            request.provider_key,
            archived.ledger,
            recent_text([s.message for s in entries]),
        )
        made = await self._frozen(request, made, checkpoint, entries[end:])
        await self._summaries.store(request.key, made)

    async def _frozen(
        self,
        request: Request,
        made: Checkpoint,
        previous: Checkpoint | None,
        after: list[StoredMessage],
    ) -> Checkpoint:
        """`made` with the stubs it freezes in the window after it (`Stubs.frozen`)."""
        work = functools.partial(self.stubs.frozen, made, previous, after, request.counter)
        result: Checkpoint = await off_loop([s.message for s in after], work)
        return result

    def summary_tokens(self, counter: TokenCounter, checkpoint: Checkpoint | None) -> int:
        """Tokens of the summary message (counted once per summary and tokenizer)."""
        if checkpoint is None or not checkpoint.text:
            return 0
        key = f"summary:{checkpoint.chain_hash}:{checkpoint.created}"
        return self._counts.message(counter, summary_message(checkpoint.text, checkpoint.kept), key)

    def pinned_tokens(self, counter: TokenCounter, checkpoint: Checkpoint | None) -> int:
        """Tokens of the facts pinned after the summary's segments (counted once)."""
        if checkpoint is None or not checkpoint.pinned:
            return 0
        text = PINNED_LABEL + "; ".join(checkpoint.pinned)
        key = f"pinned:{checkpoint.chain_hash}:{checkpoint.created}"
        return self._counts.text(counter, text, key)
