"""Planning a request's window, with the engine's own parts replaced by fakes."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.config.settings import load_settings
from proxy.conversation.tokens import CountCache
from proxy.engine.planning import Planning, questions_per_request
from proxy.sessions.records import Checkpoint
from tests.unit.planned import CONVERSATION, TRANSCRIPT, StoredHistory, planned_request, state
from tests.unit.sessions_factory import COUNTER


def planned_with() -> Planning:
    return Planning(
        settings=load_settings(None, environ={}),
        history=StoredHistory(state(1, None)),  # type: ignore[arg-type]
        counts=CountCache(),
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


def test_a_cycle_counts_the_user_turns_that_ask() -> None:
    """Only a message that asks brings a recall block that fills the room: the cycle's
    cost counts those, per request (an agent's tool loop is several requests a turn)."""
    said: list[dict[str, Any]] = [
        {"role": "user", "content": "Add the retry to the worker."},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Which port does it use? The old one?"},
        {"role": "assistant", "content": "9200."},
        {"role": "user", "content": [{"type": "text", "text": "Deploy it."}]},
        {"role": "assistant", "content": "Deployed."},
        {"role": "user", "content": "Where is the config?"},
        {"role": "assistant", "content": "In deploy/."},
    ]
    assert questions_per_request(said) == 0.5
