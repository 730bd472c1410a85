"""Plan records: what each turn of a session sent, by reference and with each part's tokens,
never a copy of a message, so a few hundred bytes a turn."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from proxy.engine.planner.window import Plan
from proxy.engine.types import Turn

__all__ = ["plan_record"]


def plan_record(
    turn: Turn,
    plan: Plan,
    summary_tokens: int,
    pinned_tokens: int,
    clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """The record of a turn planned by `plan`, pure but for its `clock` time stamp (epoch
    seconds), where `pinned_tokens` is the part of `summary_tokens` that is pinned facts."""
    request, state = turn.request, turn.state
    assert request is not None and state is not None, "a turn of a session"
    # The summary sent, if any: a chapter's checkpoint has none, and a summary that would
    # cost more than what it covers is not sent (`Planning.plan`).
    checkpoint = state.checkpoint
    if checkpoint is not None and (not checkpoint.text or plan.compression == "none"):
        checkpoint = None
    system = request.system_tokens + request.tools_tokens
    inserted = sum(block.tokens for block in plan.inserted)
    # What is left of the plan's messages once the system prompt, the summary, the marker
    # of dropped messages and the inserted blocks are taken away: the verbatim window.
    verbatim = (
        len(plan.messages)
        - len(request.system)
        - (1 if checkpoint is not None else 0)
        - (1 if plan.dropped else 0)
        - len(plan.inserted)
    )
    parts: list[dict[str, Any]] = [{"kind": "system", "tokens": system}]
    if checkpoint is not None:
        parts.append(
            {
                "kind": "summary",
                "tokens": summary_tokens - pinned_tokens,
                "checkpoint": state.checkpoints,
                "covers": [0, checkpoint.covers_until],
                "segments": len(checkpoint.segments),
            }
        )
        if checkpoint.pinned:
            pinned = {"tokens": pinned_tokens, "facts": len(checkpoint.pinned)}
            parts.append({"kind": "pinned", **pinned, "checkpoint": state.checkpoints})
    for block in plan.inserted:
        part = {"kind": block.kind, "tokens": block.tokens, "units": list(block.units)}
        if block.kind.startswith("memory"):
            part["memory_id"] = request.memory_id
        parts.append(part)
    parts.append(
        {
            "kind": "window",
            "tokens": plan.tokens - system - summary_tokens - inserted,
            "range": [state.length - verbatim, state.length],
            "dropped": plan.dropped,
        }
    )
    # Its session version is added when it is stored (`Commits.stored`).
    record = {
        "at": round(clock(), 3),
        "model": request.model,
        "budget": request.budget,
        "compression": plan.compression,
        "tokens_original": turn.tokens_original or 0,
        "tokens_sent": plan.tokens,
        "tokens_saved": max(0, (turn.tokens_original or 0) - plan.tokens),
        "parts": parts,
    }
    if not state.counted:  # sent whole, far from the budget: only a bound was known
        record |= {"tokens_original": None, "tokens_sent": None, "tokens_saved": 0}
        record["parts"] = [part | {"tokens": None} for part in parts]
    return record
