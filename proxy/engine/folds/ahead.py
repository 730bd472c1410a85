"""Summaries made ahead: after a reply, the session's next fold is made in the background once
it is due (`proxy.engine.planner.payoff`), so the request that needs it finds it ready."""

from __future__ import annotations

import functools

from proxy.config.settings import Settings
from proxy.conversation.tokens import BOUND
from proxy.engine.folds.continuing import TASK_TOKENS
from proxy.engine.folds.spans import Folding
from proxy.engine.folds.summarizer import Bill, Summaries
from proxy.engine.history import History
from proxy.engine.planner.payoff import Prompt, due, fold_due, folded, rates
from proxy.engine.planning import (
    Planning,
    fold_trigger,
    questions_per_request,
    requests_per_message,
)
from proxy.engine.types import Request
from proxy.errors import ProxyError
from proxy.facts.ledger import recent_text
from proxy.sessions.records import SessionMeta
from proxy.sessions.store import MessageLog

__all__ = ["SummariesAhead"]


class SummariesAhead:
    def __init__(
        self,
        *,
        settings: Settings,
        store: MessageLog,
        history: History,
        summaries: Summaries,
        planning: Planning,
        folding: Folding,
    ) -> None:
        self._settings = settings
        self._store = store
        self._history = history
        self._summaries = summaries
        self._planning = planning
        self._folding = folding

    def maybe_summarize(self, request: Request, meta: SessionMeta, growth: int) -> None:
        """After a reply that added `growth` tokens, schedule the next fold in the
        background once it is due: the session's cheapest cycle ends (`payoff.cycle`),
        or, where the settings choose, the prompt passed `summarize_at`."""
        assert request.key is not None
        name, checkpoint = request.counter.name, meta.checkpoint
        if name not in meta.totals or name == BOUND.name:
            return  # known by its bound alone: far from the trigger
        head = self._planning.summary_tokens(request.counter, checkpoint)
        window = meta.totals[name] - (checkpoint.before.get(name, 0) if checkpoint else 0)
        window -= self._planning.stubs.saved(checkpoint, name)
        base = request.system_tokens + request.tools_tokens
        prompt = base + head + window
        if self._summaries.breaker(request.model).open:
            return
        context = self._settings.context
        trigger = fold_trigger(request, context.summarize_at)
        # Short of every fold's size (a cycle ends past the smallest window it may keep
        # and two requests): nothing to weigh after this reply.
        smallest = folded(base + head, context.max_summary_tokens, request.budget - base)
        if (
            prompt <= trigger
            and prompt + growth <= smallest
            and prompt + 2 * growth <= request.budget
        ):
            return
        # The session's pace: what a request adds on average over the window (not this
        # reply's own, one tool result or one short answer), and how many are users' turns.
        messages = meta.length - (checkpoint.covers_until if checkpoint else 0)
        requests = requests_per_message(request.conversation) * messages
        pace = window / max(1.0, requests)
        users = questions_per_request(request.conversation)
        chosen = self._planning.cycle(request, checkpoint, growth=pace, users=users)
        # A conversation is first folded once the budget forces it: when the next request,
        # or its prompt continued for a summary, would not fit (one that fits is sent
        # whole: nothing is left to a summary that need not be, nor paid for before it
        # saves anything); from then on, when its cycle says.
        if chosen is not None:
            if checkpoint is None:
                # (and past `summarize_at`: on a small model the instruction alone is much
                # of the budget)
                if prompt <= trigger or prompt + growth + TASK_TOKENS <= request.budget:
                    return
            elif not due(prompt, growth, request.budget, chosen):
                return
            budget = min(prompt - 1, chosen.end)  # a fold that keeps the cycle's window
        else:
            # Past `summarize_at`, planned as if the budget ended there, so the fold leaves
            # its share of that smaller room and the next one is several turns away.
            budget = trigger
            if prompt <= budget:
                return
            if context.cache_aware:  # and only once it pays (the rent-or-buy rule)
                ratio = self._planning.keep_ratio(
                    request, checkpoint, budget, growth=pace, users=users
                )
                keep = min(window, int(ratio * (budget - base)))
                summary = context.max_summary_tokens
                after = base + head + summary + keep
                shape = Prompt(prompt, after, base + head, request.budget, growth, summary)
                if not fold_due(shape, rates(request.prices)):
                    return
        job = functools.partial(self._made, request, budget)
        self._summaries.schedule(request.key, job, request.secrets)

    async def _made(self, request: Request, budget: int) -> None:
        """The fold planned as if the budget ended at `budget`, made and stored with the
        stubs it freezes, its summarizer calls owed by the session's next turn."""
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
            plan = await self._planning.plan_entries(
                request,
                self._planning.stubs.counted(entries, checkpoint, request.counter),
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
        bill = Bill()
        made = None
        try:
            made = await self._folding.fold(
                request,
                entries[start:end],
                entries[end:],
                end=covers + end,
                previous=checkpoint,
                summaries=meta.checkpoints,
                recent=recent_text([s.message for s in entries]),
                mode="background",
                bill=bill,
            )
        finally:
            # Owed by the session's next turn, made or failed: its calls were paid for.
            await self._summaries.store(request.key, made, bill.charge)
