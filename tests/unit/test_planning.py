"""Planning's summary step, with the engine's own parts replaced by fakes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.config.settings import load_settings
from proxy.conversation.tokens import CountCache, counter_for_model
from proxy.engine.folds.ahead import SummariesAhead
from proxy.engine.folds.summarizer import Bill
from proxy.engine.planner.reconcile import Match
from proxy.engine.planning import Planning
from proxy.engine.types import Request, SessionView
from proxy.errors import ContextOverflow
from proxy.sessions.records import Checkpoint
from tests.unit.sessions_factory import COUNTER, entries, meta

KEY = ("t1", "s")
TOKENIZER = counter_for_model("gpt-4o-mini")
TRANSCRIPT = entries(*(f"message {i}" for i in range(6)))
CONVERSATION = [s.message for s in TRANSCRIPT]


class Store:
    """Reads the meta record a background summary just stored."""

    def __init__(self, version: int) -> None:
        self.version = version

    async def load(self, tenant: str, session_id: str) -> Any:
        return meta(TRANSCRIPT, version=self.version)


class History:
    """Reads the session again: with the summary that landed."""

    def __init__(self, state: SessionView) -> None:
        self.fresh = state
        self.reads = 0

    async def state(self, request: Request) -> SessionView:
        self.reads += 1
        return self.fresh


class Summaries:
    """No background summary running now; none may be made here."""

    def running(self, key: Any) -> None:
        return None

    async def make(self, *args: Any, **kwargs: Any) -> Checkpoint:
        raise AssertionError("summarized again what a background summary had just summarized")


def state(version: int, checkpoint: Checkpoint | None) -> SessionView:
    match = Match("full", len(TRANSCRIPT), len(TRANSCRIPT), [], TRANSCRIPT[-1].chain)
    return SessionView(
        base=meta(TRANSCRIPT, version=version),
        match=match,
        new=(),
        totals={COUNTER: 10 * len(TRANSCRIPT)},
        checkpoint=checkpoint,
        checkpoints=1 if checkpoint else 0,
        expected_version=version,
        serialized=None,
    )


def planned_request(budget: int, system_tokens: int) -> Request:
    """A request for the conversation, with no system message or tools but
    `system_tokens` (the model's input limit a quarter over the budget)."""
    return Request(
        model="gpt-4o-mini",
        counter=TOKENIZER,
        budget=budget,
        input_limit=budget + budget // 4,
        messages=CONVERSATION,
        system=[],
        conversation=CONVERSATION,
        system_tokens=system_tokens,
        tools_tokens=0,
        mode="auto",
        key=KEY,
        size=None,
    )


async def test_a_summary_that_landed_after_the_state_was_read_is_used_not_made_again() -> None:
    landed = Checkpoint(4, TRANSCRIPT[3].chain, ("They said hello.",), 5, "m", 1.0, {COUNTER: 40})
    history = History(state(2, landed))
    planning = Planning(
        settings=load_settings(None, environ={}),
        store=Store(version=2),  # type: ignore[arg-type]
        history=history,  # type: ignore[arg-type]
        summaries=Summaries(),  # type: ignore[arg-type]
        counts=CountCache(),
        ledger=None,  # type: ignore[arg-type]
    )
    request = planned_request(budget=1000, system_tokens=3)
    read_before = state(1, None)  # version 1: before the background summary was stored
    after, plan = await planning.fold_and_plan(request, read_before, (0, 4), Bill())
    assert history.reads == 1 and after.checkpoint == landed
    assert plan.compression == "summary" and plan.summarize is None
    assert plan.messages[0]["content"].endswith("They said hello.")
    assert plan.messages[1:] == CONVERSATION[4:]


class FailingPlanStore(Store):
    async def messages(self, tenant: str, session_id: str, start: int, end: int) -> Any:
        return TRANSCRIPT[start:end]


class CountingSummaries(Summaries):
    def __init__(self) -> None:
        self.failures: list[tuple[str, str]] = []

    def failed(self, model: str, mode: str) -> None:
        self.failures.append((model, mode))


class FilledHistory(History):
    async def counted(self, entries: Any, *args: Any) -> Any:
        return entries


async def test_a_background_summary_that_cannot_be_planned_is_counted_as_failed() -> None:
    """No plan fits (the request's last turn alone is over the trigger): the summary
    fails before its model is called, and `summarizations_total{outcome="error"}` says so."""
    summaries = CountingSummaries()
    settings = load_settings(None, environ={})
    store, history = FailingPlanStore(version=1), FilledHistory(state(1, None))
    planning = Planning(
        settings=settings,
        store=store,  # type: ignore[arg-type]
        history=history,  # type: ignore[arg-type]
        summaries=summaries,  # type: ignore[arg-type]
        counts=CountCache(),
        ledger=None,  # type: ignore[arg-type]
    )
    ahead = SummariesAhead(
        settings=settings,
        store=store,  # type: ignore[arg-type]
        history=history,  # type: ignore[arg-type]
        summaries=summaries,  # type: ignore[arg-type]
        planning=planning,
    )
    request = planned_request(budget=30, system_tokens=40)  # over budget: no plan fits
    with pytest.raises(ContextOverflow):
        await ahead._made(request, 30)
    assert summaries.failures == [("gpt-4o-mini", "background")]


class StoredHistory(FilledHistory):
    async def window(self, request: Request, state: SessionView, start: int) -> Any:
        return TRANSCRIPT[start:]


def planned_with() -> Planning:
    return Planning(
        settings=load_settings(None, environ={}),
        store=Store(version=1),  # type: ignore[arg-type]
        history=StoredHistory(state(1, None)),  # type: ignore[arg-type]
        summaries=Summaries(),  # type: ignore[arg-type]
        counts=CountCache(),
        ledger=None,  # type: ignore[arg-type]
    )


@settings(max_examples=40, deadline=None)
@given(words=st.integers(min_value=1, max_value=120), budget=st.integers(60, 2000))
async def test_a_plan_never_sends_more_than_the_conversation_uncompressed(
    words: int, budget: int
) -> None:
    """However long the summary in effect (a summarizer that wrote too much, a span of
    short messages), the plan sends at most what the conversation costs as it is."""
    summary = " ".join(f"fact{i}" for i in range(words))
    covered = Checkpoint(4, TRANSCRIPT[3].chain, (summary,), words, "m", 1.0, {COUNTER: 40})
    planning = planned_with()
    request = planned_request(budget=budget, system_tokens=3)
    whole = 3 + 10 * len(TRANSCRIPT)  # the system's tokens and the transcript's
    plan = await planning.plan(request, state(1, covered), allow_summary=False)
    assert plan.tokens <= whole
    if plan.compression == "none":
        assert plan.messages == CONVERSATION  # sent as it is
    else:  # the summary is the cheaper way: it replaces what it covers
        assert plan.messages[1:] == CONVERSATION[4:]
        assert plan.tokens < whole
