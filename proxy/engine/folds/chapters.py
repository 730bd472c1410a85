"""Agents that compact their own history, served from the session: a client going on from its
own summary starts a chapter, and an agent asking for one is answered from the session's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from proxy.config.settings import Settings
from proxy.engine.folds.spans import Ledger
from proxy.engine.folds.summarizer import Summaries
from proxy.engine.history import History
from proxy.engine.planner import agent_compaction
from proxy.engine.types import Request, SessionView
from proxy.sessions.store import MessageLog

__all__ = ["Chapters"]


class Chapters:
    def __init__(
        self,
        *,
        settings: Settings,
        store: MessageLog,
        history: History,
        summaries: Summaries,
        ledger: Ledger,
    ) -> None:
        self._settings = settings
        self._store = store
        self._history = history
        self._summaries = summaries
        self._ledger = ledger

    async def chapter(self, request: Request, state: SessionView) -> SessionView:
        """The transcript so far covered by a checkpoint with no text (archived for recall,
        stored with the turn), so the window starts at the client's new conversation."""
        assert request.key is not None and state.base is not None
        previous = state.checkpoint
        start = previous.covers_until if previous else 0
        span = await self._store.messages(*request.key, start, state.kept)
        ledger = await self._ledger(request.key, state.checkpoints, previous)
        checkpoint = await self._summaries.chapter(
            span, state.kept, previous, state.base.totals, ledger
        )
        return replace(
            state, checkpoint=checkpoint, checkpoints=state.checkpoints + 1, pending=checkpoint
        )

    async def answer(self, request: Request, state: SessionView) -> dict[str, Any] | None:
        """The reply to an agent's request for a summary, made from the session's summary
        and at most `max_summary_tokens` of messages after it; None: the model writes it."""
        context, checkpoint = self._settings.context, state.checkpoint
        if not context.answer_compaction or checkpoint is None or not checkpoint.text:
            return None  # no summary, or a client's own (a chapter's): nothing to answer from
        name = request.counter.name
        covered = checkpoint.before.get(name)
        asked = state.new[-1].tokens.get(name) if state.new else None
        if covered is None or asked is None:
            return None
        if state.totals[name] - covered - asked > context.max_summary_tokens:
            return None
        recent = await self._history.window(request, state, checkpoint.covers_until)
        messages = [stored.message for stored in recent[:-1]]
        return agent_compaction.answer(checkpoint.text, messages, request.model, request.counter)
