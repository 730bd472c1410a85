"""How far the provider's token count is from ours, learned per session and model
(`SessionMeta.calibration`: any process plans the same budget), applied where we undercount."""

from __future__ import annotations

__all__ = ["MAX_FACTOR", "SMOOTHING", "factor", "smoothed"]

SMOOTHING = 0.2  # weight of the newest observation
MAX_FACTOR = 1.5


def smoothed(previous: float | None, estimated: int | None, actual: object) -> float | None:
    """The calibration after one more turn: `previous` moved `SMOOTHING` of the way toward
    actual/estimated (that ratio for a first turn), unchanged where there is nothing to learn."""
    if not isinstance(actual, int) or not estimated or estimated <= 0 or actual <= 0:
        return previous
    ratio = actual / estimated
    return ratio if previous is None else previous + SMOOTHING * (ratio - previous)


def factor(ratio: float | None) -> float:
    """What to divide a budget by: at least 1 (overcounting only costs headroom), and
    bounded so one odd sample cannot starve a model's context."""
    return min(MAX_FACTOR, max(1.0, ratio if ratio is not None else 1.0))
