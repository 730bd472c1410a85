"""Summaries made ahead, with the engine's own parts replaced by fakes."""

from __future__ import annotations

import pytest

from proxy.config.settings import load_settings
from proxy.conversation.tokens import CountCache
from proxy.engine.folds.ahead import SummariesAhead
from proxy.engine.planning import Planning
from proxy.errors import ContextOverflow
from tests.unit.planned import (
    CountingSummaries,
    FailingPlanStore,
    FilledHistory,
    planned_request,
    state,
)


async def test_a_background_summary_that_cannot_be_planned_is_counted_as_failed() -> None:
    """No plan fits (the request's last turn alone is over the trigger): the summary
    fails before its model is called, and `summarizations_total{outcome="error"}` says so."""
    summaries = CountingSummaries()
    settings = load_settings(None, environ={})
    store, history = FailingPlanStore(version=1), FilledHistory(state(1, None))
    planning = Planning(settings=settings, history=history, counts=CountCache())  # type: ignore[arg-type]
    ahead = SummariesAhead(
        settings=settings,
        store=store,  # type: ignore[arg-type]
        history=history,  # type: ignore[arg-type]
        summaries=summaries,  # type: ignore[arg-type]
        planning=planning,
        folding=None,  # type: ignore[arg-type]
    )
    request = planned_request(budget=30, system_tokens=40)  # over budget: no plan fits
    with pytest.raises(ContextOverflow):
        await ahead._made(request, 30)
    assert summaries.failures == [("gpt-4o-mini", "background")]
