"""The token budget of one request, pure given the model's limits, so a preview or a count
computes it exactly as a turn does."""

from __future__ import annotations

import math
from typing import Any

from proxy.engine.planner import calibration
from proxy.errors import ContextOverflow

__all__ = ["budget"]


def budget(
    model: str,
    max_input_tokens: int,
    body: dict[str, Any],
    ratio: float,
    calibrated: float | None = None,
) -> int:
    """floor(ratio × input limit), less room for the requested output, in our tokenizer's
    units (divided by the calibration factor where we undercount)."""
    tokens = math.floor(ratio * max_input_tokens)
    requested = body.get("max_completion_tokens") or body.get("max_tokens")
    if isinstance(requested, int) and requested > 0:
        tokens = min(tokens, max_input_tokens - requested)
    tokens = math.floor(tokens / calibration.factor(calibrated))
    if tokens <= 0:
        raise ContextOverflow(
            f"max_tokens={requested} leaves no room for input in {model}'s "
            f"{max_input_tokens}-token context.",
            param="max_tokens",
        )
    return tokens
