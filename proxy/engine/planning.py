"""A request's window planned around the pure planner, reading and counting no message while
the session's totals show it within budget."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from proxy.concurrency import off_loop
from proxy.config.settings import Settings
from proxy.conversation.identity import Message
from proxy.conversation.tokens import CountCache, TokenCounter
from proxy.engine.history import History
from proxy.engine.planner.payoff import Cycle, Kept, cycle, rates
from proxy.engine.planner.stubs import Stubs
from proxy.engine.planner.window import Plan, plan_context
from proxy.engine.types import Request, SessionView
from proxy.errors import ContextOverflow
from proxy.facts.ledger import recent_text
from proxy.recall.index import asking
from proxy.sessions.records import Checkpoint, StoredMessage
from proxy.summary.message import PINNED_LABEL, summary_message

__all__ = [
    "KEEP_RECENT_RATIO",
    "Planning",
    "fold_trigger",
    "questions_per_request",
    "requests_per_message",
]

logger = logging.getLogger("context_proxy.engine")

# What a fold keeps verbatim where the cost does not choose it (`context.cache_aware` off).
KEEP_RECENT_RATIO = 0.5
# The newest messages a session's pace (tokens and user turns per request) is read from.
_PACE = 64


class Planning:
    def __init__(
        self,
        *,
        settings: Settings,
        history: History,
        counts: CountCache,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._clock = clock  # epoch seconds: how long the session's prompt cache was idle
        self._history = history
        self._counts = counts
        self.stubs = Stubs(settings.context, counts)

    async def plan(
        self, request: Request, state: SessionView, *, allow_summary: bool, rewrite: bool = False
    ) -> Plan:
        """The messages to send; `rewrite` says the client is about to rewrite its prompt
        (an agent compacting), so a fold past the trigger costs no cache rewrite."""
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
        cold = allow_summary and self._early(request, state, total, rewrite)
        if total <= request.budget and not cold:
            if state.match.whole and covers >= state.origin:
                recent = request.conversation[covers - state.origin :]
            else:
                recent = [s.message for s in await self._history.window(request, state, covers)]
            recent = self.stubs.sent(recent, checkpoint)
            return Plan(
                [*request.system, *head, *recent], total, "summary" if head else "none", None, 0
            )
        entries = await self._history.counted_window(request, state, covers, {name})
        entries = self.stubs.counted(entries, checkpoint, request.counter)
        plan = None
        if cold:  # fold as a summary made ahead would, if there is anything to fold
            trigger = fold_trigger(request, self._settings.context.summarize_at)
            plan = await self.plan_entries(
                request, entries, checkpoint, allow_summary=True, budget=trigger
            )
            plan = plan if plan.summarize is not None else None
        if plan is None:
            plan = await self.plan_entries(
                request, entries, checkpoint, allow_summary=allow_summary
            )
        if plan.summarize is None:
            return plan
        start, end = plan.summarize
        return replace(plan, summarize=(covers + start, covers + end))

    async def plan_entries(
        self,
        request: Request,
        entries: list[StoredMessage],
        checkpoint: Checkpoint | None,
        *,
        allow_summary: bool,
        budget: int | None = None,
    ) -> Plan:
        """`plan_counted` for stored entries, off the loop when they are long: cutting a
        long paste is seconds of counting."""
        messages = [s.message for s in entries]
        counts = [s.tokens[request.counter.name] for s in entries]
        fit = functools.partial(
            self.plan_counted,
            request,
            messages,
            counts,
            checkpoint,
            allow_summary=allow_summary,
            budget=budget,
        )
        return await off_loop(messages, fit)

    def plan_counted(
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
                keep_recent_ratio=self.keep_ratio(
                    request,
                    checkpoint,
                    budget or request.budget,
                    growth=sum(counts[-_PACE:]) / _requests(messages[-_PACE:]),
                    users=questions_per_request(messages),
                ),
                allow_summary=allow_summary,
                system_tokens=request.system_tokens,
                kept=checkpoint.kept if checkpoint else (),
            )
        except ContextOverflow as exc:
            raise ContextOverflow(
                f"This model's context budget is {request.budget} tokens; {exc}.", param="messages"
            ) from None

    def keep_ratio(
        self,
        request: Request,
        checkpoint: Checkpoint | None,
        budget: int,
        *,
        growth: float,
        users: float,
    ) -> float:
        """What a fold planned within `budget` keeps verbatim, as a share of that budget
        less system and tools: the setting's, or the cycle's (of the request's budget)."""
        chosen = self.cycle(request, checkpoint, growth=growth, users=users)
        if chosen is None:
            context = self._settings.context
            return context.keep_recent_ratio or KEEP_RECENT_RATIO
        base = request.system_tokens + request.tools_tokens
        kept = chosen.share * (request.budget - base)
        return min(1.0, kept / max(1, budget - base))

    def cycle(
        self, request: Request, checkpoint: Checkpoint | None, *, growth: float, users: float
    ) -> Cycle | None:
        """The session's cheapest cycle from fold to fold at its pace (`payoff.cycle`);
        None where the settings choose (`keep_recent_ratio` set, `cache_aware` off)."""
        context = self._settings.context
        if context.keep_recent_ratio is not None or not context.cache_aware:
            return None
        base = request.system_tokens + request.tools_tokens
        kept = Kept(
            stable=base + self.summary_tokens(request.counter, checkpoint),
            budget=request.budget,
            room=request.budget - base,
            # Two figures of the pace: a cycle is chosen once for the replies it spans.
            growth=float(f"{growth:.2g}"),
            users=round(users, 1),
            summary=context.max_summary_tokens,
            recall=min(int(context.recall_ratio * request.budget), context.recall_max_tokens),
        )
        return cycle(kept, rates(request.prices))

    def _early(self, request: Request, state: SessionView, total: int, rewrite: bool) -> bool:
        """Whether to fold now, ahead of the budget: past the fold trigger with a cold cache
        or a client about to rewrite its prompt, a fold costs no cache rewrite."""
        context, base, prices = self._settings.context, state.base, request.prices
        if not context.cache_aware or base is None or request.own_budget:
            return False
        if total <= fold_trigger(request, context.summarize_at):
            return False
        ttl = prices.ttl_seconds if prices is not None else context.cache_ttl_seconds
        last = base.receipt.last_at  # when the session's last turn was sent
        return rewrite or self._clock() - (last if last is not None else base.updated) > ttl

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


def questions_per_request(messages: Sequence[Message]) -> float:
    """User turns that ask, per upstream request (each answered by one assistant message)
    among the newest messages: each brings a recall block that fills the room (one that
    asks nothing brings only the facts it names, `Archived.found`)."""
    newest = messages[-_PACE:]
    asks = sum(m.get("role") == "user" and asking(recent_text([m], 1)) for m in newest)
    return asks / _requests(newest)


def requests_per_message(messages: Sequence[Message]) -> float:
    """Upstream requests (assistant messages) per message among the newest messages."""
    newest = messages[-_PACE:]
    return _requests(newest) / max(1, len(newest))


def _requests(messages: Sequence[Message]) -> int:
    return max(1, sum(message.get("role") == "assistant" for message in messages))


def fold_trigger(request: Request, summarize_at: float) -> int:
    """The prompt's size past which a fold may be made: `summarize_at` of the room
    system messages and tools leave in the budget."""
    base = request.system_tokens + request.tools_tokens
    return int(base + summarize_at * (request.budget - base))
