"""A fold the turn waits for, which never makes a summary twice (one on its way is waited
for, one that landed is used) and leaves the turn to truncation when it fails."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from proxy.config.settings import Settings
from proxy.engine.folds.spans import Folding
from proxy.engine.folds.summarizer import Bill, Summaries
from proxy.engine.history import History
from proxy.engine.planner.window import Plan
from proxy.engine.planning import Planning
from proxy.engine.types import Request, SessionView
from proxy.errors import ProxyError
from proxy.facts.ledger import recent_text
from proxy.sessions.records import Checkpoint, SessionKey
from proxy.sessions.store import MessageLog
from proxy.summary.fold import SummarizationError

__all__ = ["InlineFold"]

logger = logging.getLogger("context_proxy.engine")


class InlineFold:
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

    async def fold_and_plan(
        self, request: Request, state: SessionView, span: tuple[int, int], bill: Bill
    ) -> tuple[SessionView, Plan]:
        """Fold `span` into the summary and plan again (truncating where that fails),
        charging the turn for the summarizer's calls on `bill`, used or not."""
        assert request.key is not None
        if self._summaries.running(request.key) is not None:  # one is on its way: wait for it
            await self._summaries.wait(request.key)
        if await self._changed(request.key, state):
            state = await self._history.state(request)
            plan = await self._planning.plan(request, state, allow_summary=True)
            if plan.summarize is None:
                return state, plan
            span = plan.summarize
        start, end = span
        window = await self._history.counted_window(request, state, start, set(state.totals))
        try:
            checkpoint = await asyncio.wait_for(
                self._folding.fold(
                    request,
                    window[: end - start],
                    window[end - start :],
                    end=end,
                    previous=state.checkpoint,
                    summaries=state.checkpoints,
                    recent=recent_text(request.conversation),
                    mode="sync",
                    bill=bill,
                ),
                self._settings.context.summary_timeout_seconds,
            )
        except (SummarizationError, ProxyError, TimeoutError) as exc:
            reason = self._summaries.redact(str(exc), request.secrets)
            logger.warning("summarization failed, truncating instead: %s", reason)
            return state, await self._planning.plan(request, state, allow_summary=False)
        state = await self._adopt(request, state, checkpoint)
        return state, await self._planning.plan(request, state, allow_summary=False)

    async def _changed(self, key: SessionKey, state: SessionView) -> bool:
        """Whether the stored session changed since `state` was read, which under the turn
        lock only a background summary can have done."""
        meta = await self._store.load(*key)
        return (meta.version if meta is not None else 0) != state.expected_version

    async def _adopt(
        self, request: Request, state: SessionView, checkpoint: Checkpoint
    ) -> SessionView:
        """Put a new summary in effect: stored now if it covers stored messages only
        (then a failed upstream call does not waste it), else with the turn."""
        assert request.key is not None
        adopted = replace(state, checkpoint=checkpoint, checkpoints=state.checkpoints + 1)
        if checkpoint.covers_until > state.kept:
            return replace(adopted, pending=checkpoint)
        stored = await self._summaries.store(request.key, checkpoint)
        base = state.base
        if (
            stored is not None
            and base is not None
            and (stored.head, stored.length) == (base.head, base.length)
            and state.kept == base.length
        ):
            return replace(adopted, expected_version=stored.version)
        return adopted  # the turn's commit will meet a newer version and replay
