"""What follows a stored turn, in this order: the calibration gauge, the next summary made
ahead, and what was said remembered; none of it may fail the turn."""

from __future__ import annotations

import logging
from collections.abc import Callable

from proxy.costs.usage import Usage
from proxy.engine.commit import Stored
from proxy.engine.folds.ahead import SummariesAhead
from proxy.engine.planner import calibration
from proxy.engine.remembering import Memories
from proxy.engine.types import Request, Turn
from proxy.observability import metrics
from proxy.observability.metrics import ModelLabels

__all__ = ["AfterCommit"]

logger = logging.getLogger("context_proxy.engine")


class AfterCommit:
    def __init__(
        self,
        *,
        ahead: SummariesAhead,
        memories: Memories,
        label: ModelLabels,
        redact: Callable[[str], str],
    ) -> None:
        self._ahead = ahead
        self._memories = memories
        self._label = label
        self._redact = redact
        # Per model, smoothed over this process's turns: what the operator sees. Each
        # session's own calibration plans its budget (`SessionMeta.calibration`).
        self._estimates: dict[str, float] = {}

    def gauge(self, turn: Turn, used: Usage | None) -> None:
        """Learn the process's token estimate ratio from what the provider counted of a
        turn the proxy planned and sent."""
        if not turn.managed or turn.answer is not None:
            return
        label = self._label(turn.model)
        actual = used.prompt if used is not None else None
        estimate = calibration.smoothed(self._estimates.get(label), turn.tokens_sent, actual)
        if estimate is not None:
            self._estimates[label] = estimate
            metrics.TOKEN_ESTIMATE_RATIO.labels(label).set(estimate)

    async def stored(self, request: Request, stored: Stored) -> None:
        """After a stored turn: the next summary made ahead when due, and what it said
        remembered under the request's memory id."""
        if not request.own_budget:
            self._ahead.maybe_summarize(request, stored.meta, stored.growth)
        if request.memory_id is None:
            return
        assert request.key is not None
        tenant, session_id = request.key
        try:
            await self._memories.learn(tenant, request.memory_id, session_id, stored.messages)
        except Exception as exc:
            logger.warning("memory not updated: %s", self._redact(str(exc)))
