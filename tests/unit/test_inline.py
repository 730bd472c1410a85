"""A fold the turn waits for, with the engine's own parts replaced by fakes."""

from __future__ import annotations

from proxy.config.settings import load_settings
from proxy.conversation.tokens import CountCache
from proxy.engine.folds.inline import InlineFold
from proxy.engine.folds.summarizer import Bill
from proxy.engine.planning import Planning
from proxy.sessions.records import Checkpoint
from tests.unit.planned import (
    CONVERSATION,
    TRANSCRIPT,
    History,
    Store,
    Summaries,
    planned_request,
    state,
)
from tests.unit.sessions_factory import COUNTER


async def test_a_summary_that_landed_after_the_state_was_read_is_used_not_made_again() -> None:
    landed = Checkpoint(4, TRANSCRIPT[3].chain, ("They said hello.",), 5, "m", 1.0, {COUNTER: 40})
    history = History(state(2, landed))
    settings = load_settings(None, environ={})
    planning = Planning(settings=settings, history=history, counts=CountCache())  # type: ignore[arg-type]
    fold = InlineFold(
        settings=settings,
        store=Store(version=2),  # type: ignore[arg-type]
        history=history,  # type: ignore[arg-type]
        summaries=Summaries(),  # type: ignore[arg-type]
        planning=planning,
        folding=None,  # type: ignore[arg-type]
    )
    request = planned_request(budget=1000, system_tokens=3)
    read_before = state(1, None)  # version 1: before the background summary was stored
    after, plan = await fold.fold_and_plan(request, read_before, (0, 4), Bill())
    assert history.reads == 1 and after.checkpoint == landed
    assert plan.compression == "summary" and plan.summarize is None
    assert plan.messages[0]["content"].endswith("They said hello.")
    assert plan.messages[1:] == CONVERSATION[4:]
