"""Token-estimate calibration: how far the provider's count is from ours.

The provider's `usage.prompt_tokens` for a turn we counted gives the ratio
actual/estimate. Each session keeps its own, smoothed over its turns, in its meta record
(`SessionMeta.calibration`, per model), so a session's budget is the same whichever
process serves it; it is applied to the budget when we undercount, so a tokenizer we only
approximate still keeps requests inside the limit. Overcounting is left alone: it only
costs headroom. A request without a session has no turns to learn from: its budget is
uncalibrated (the budget ratio's headroom is its margin). Pure.
"""

from __future__ import annotations

__all__ = ["MAX_FACTOR", "SMOOTHING", "factor", "smoothed"]

SMOOTHING = 0.2  # weight of the newest observation
MAX_FACTOR = 1.5


def smoothed(previous: float | None, estimated: int | None, actual: object) -> float | None:
    """The calibration after a turn we estimated at `estimated` tokens and the provider
    counted `actual`: `previous` moved by `SMOOTHING` toward the new ratio (the ratio
    itself for a first observation); `previous` where there is nothing to learn."""
    if not isinstance(actual, int) or not estimated or estimated <= 0 or actual <= 0:
        return previous
    ratio = actual / estimated
    return ratio if previous is None else previous + SMOOTHING * (ratio - previous)


def factor(ratio: float | None) -> float:
    """What to divide a budget by: ≥ 1, and bounded so one odd sample cannot starve a
    model's context."""
    return min(MAX_FACTOR, max(1.0, ratio if ratio is not None else 1.0))
