"""Summaries made ahead, with the engine's own parts replaced by fakes."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.config.settings import load_settings
from proxy.conversation.tokens import CountCache
from proxy.engine.folds.ahead import SummariesAhead
from proxy.engine.planning import Planning
from proxy.errors import ContextOverflow
from tests.unit.planned import (
    TRANSCRIPT,
    CountingSummaries,
    FailingPlanStore,
    FilledHistory,
    planned_request,
    state,
)
from tests.unit.sessions_factory import COUNTER, meta


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


class Scheduling(CountingSummaries):
    """Records the folds scheduled ahead; the summarizer's breaker is closed."""

    def __init__(self) -> None:
        super().__init__()
        self.scheduled = 0

    def breaker(self, model: str) -> Any:
        return SimpleNamespace(open=False)

    def schedule(self, key: Any, job: Any, secrets: Any) -> None:
        self.scheduled += 1


@pytest.mark.parametrize(
    ("window", "folds"),
    [
        (7_000, False),  # past `summarize_at` (7,300 with the system), far from the budget
        (8_200, False),  # the next request and a continuation's instruction still fit
        (8_600, True),  # they would not: the last fold that is made ahead and continued
    ],
)
def test_a_conversation_is_first_folded_once_the_budget_forces_it(window: int, folds: bool) -> None:
    """A conversation that fits is sent whole: its first fold waits until the next request,
    with a continued fold's instruction, would pass the budget. A fold made earlier pays
    the summarizer's read of the whole prompt before it saves anything, and a client
    that stops there paid more than it would have without the proxy."""
    summaries = Scheduling()
    settings = load_settings(None, environ={})
    history = FilledHistory(state(1, None))
    planning = Planning(settings=settings, history=history, counts=CountCache())  # type: ignore[arg-type]
    ahead = SummariesAhead(
        settings=settings,
        store=FailingPlanStore(version=1),  # type: ignore[arg-type]
        history=history,  # type: ignore[arg-type]
        summaries=summaries,  # type: ignore[arg-type]
        planning=planning,
        folding=None,  # type: ignore[arg-type]
    )
    request = planned_request(budget=10_000, system_tokens=1_000)
    session = replace(meta(TRANSCRIPT), totals={COUNTER: window})
    ahead.maybe_summarize(request, session, growth=100)
    assert summaries.scheduled == int(folds)
