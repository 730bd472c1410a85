"""The token budget of one request: floor(ratio × input limit), room for the requested
output, and the calibration that keeps an approximate tokenizer inside the limit."""

from __future__ import annotations

import math
from typing import Any

from proxy.engine.calibration import Calibration
from proxy.errors import ContextOverflow
from proxy.observability import metrics
from proxy.observability.metrics import ModelLabels
from proxy.upstream.client import Upstream

__all__ = ["Budgets"]


class Budgets:
    """Budgets per request, and what the provider's usage teaches about our counts."""

    def __init__(self, upstream: Upstream, labels: ModelLabels) -> None:
        self._upstream = upstream
        self._label = labels
        self.calibration = Calibration()

    def budget(self, model: str, body: dict[str, Any], ratio: float) -> int:
        """floor(ratio × input limit), and room left for the requested output, in our
        tokenizer's units: divided by the calibration factor when we undercount."""
        limits = self._upstream.models.limits(model)
        label = self._label(model)
        if limits.source == "default":
            metrics.MODEL_LIMIT_DEFAULTED.labels(label).inc()
        budget = math.floor(ratio * limits.max_input_tokens)
        requested = body.get("max_completion_tokens") or body.get("max_tokens")
        if isinstance(requested, int) and requested > 0:
            budget = min(budget, limits.max_input_tokens - requested)
        budget = math.floor(budget / self.calibration.factor(label))
        if budget <= 0:
            raise ContextOverflow(
                f"max_tokens={requested} leaves no room for input in {model}'s "
                f"{limits.max_input_tokens}-token context.",
                param="max_tokens",
            )
        return budget

    def observe(self, model: str, tokens_sent: int | None, usage: dict[str, Any] | None) -> None:
        """Calibrate our estimate against the provider's count of what we sent."""
        prompt_tokens = (usage or {}).get("prompt_tokens")
        if tokens_sent and isinstance(prompt_tokens, int):
            self.calibration.observe(self._label(model), tokens_sent, prompt_tokens)
