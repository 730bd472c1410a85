"""Token-estimate calibration: how far the provider's count is from ours, per model.

The provider's `usage.prompt_tokens` for a request we counted gives the ratio
actual/estimate. It is smoothed, exported as a gauge, and applied to the budget
when we undercount, so a tokenizer we only approximate still keeps requests
inside the limit. Overcounting is left alone: it only costs headroom.
"""

from __future__ import annotations

from proxy.observability import metrics

SMOOTHING = 0.2  # weight of the newest observation
MAX_FACTOR = 1.5


class Calibration:
    def __init__(self) -> None:
        self._ratios: dict[str, float] = {}

    def observe(self, label: str, estimated: int, actual: int) -> None:
        if estimated <= 0 or actual <= 0:
            return
        ratio = actual / estimated
        previous = self._ratios.get(label)
        smoothed = ratio if previous is None else previous + SMOOTHING * (ratio - previous)
        self._ratios[label] = smoothed
        metrics.TOKEN_ESTIMATE_RATIO.labels(label).set(smoothed)

    def ratio(self, label: str) -> float | None:
        return self._ratios.get(label)

    def factor(self, label: str) -> float:
        """What to divide the budget by: ≥ 1, and bounded so one odd sample cannot
        starve a model's context."""
        return min(MAX_FACTOR, max(1.0, self._ratios.get(label, 1.0)))
