"""The session as a request leaves it (`SessionView`'s properties) and the turn a plan
makes of a request (`planned_turn`, pure): what a turn says it sent and saved, where the
client's conversation starts after its own compactions, and when the client's bytes go
upstream as they came. Built by hand from stored messages with real hashes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from proxy.conversation.tokens import BOUND
from proxy.engine.planner.reconcile import Match, Serialized
from proxy.engine.planner.window import Plan
from proxy.engine.types import Request, SessionView, planned_turn
from proxy.sessions.records import Checkpoint
from tests.unit.planned import TOKENIZER
from tests.unit.sessions_factory import COUNTER, entries, meta

SYSTEM = {"role": "system", "content": "Be brief."}
STORED = entries(*(f"stored {i}" for i in range(6)))  # 10 tokens each
NEW = entries("new question", start=6, head=STORED[-1].chain)
CONVERSATION = [s.message for s in (*STORED, *NEW)]


def request(**changes: Any) -> Request:
    """A request that resends the whole conversation after a system message counted 7
    tokens, with tools counted 5, on a budget of 1000."""
    made = Request(
        model="gpt-4o-mini",
        counter=TOKENIZER,
        budget=1000,
        input_limit=1250,
        messages=[SYSTEM, *CONVERSATION],
        system=[SYSTEM],
        conversation=CONVERSATION,
        system_tokens=7,
        tools_tokens=5,
        mode="auto",
        key=("t1", "s"),
        size=None,
    )
    return replace(made, **changes)


def view(**changes: Any) -> SessionView:
    """The session as the request leaves it: six stored messages and one new (70 tokens)."""
    made = SessionView(
        base=meta(STORED),
        match=Match("full", 6, 6, [NEW[0].hash], STORED[-1].chain),
        new=tuple(NEW),
        totals={COUNTER: 70},
        checkpoint=None,
        checkpoints=0,
        expected_version=1,
        serialized=Serialized([SYSTEM, *CONVERSATION], 1),
    )
    return replace(made, **changes)


def whole_plan(tokens: int = 82) -> Plan:
    return Plan([SYSTEM, *CONVERSATION], tokens, "none", None, 0)


def summary(covers: int = 4, created: float = 1_700_000_123.0) -> Checkpoint:
    return Checkpoint(
        covers, STORED[covers - 1].chain, ("They said hello.",), 5, "m", created, {COUNTER: 40}
    )


# -- SessionView ----------------------------------------------------------------------


def test_a_session_known_only_by_its_bound_is_not_counted() -> None:
    assert view().counted
    assert not view(totals={BOUND.name: 4000}).counted


def test_the_transcript_keeps_the_stored_messages_it_matched_and_adds_the_new() -> None:
    forked = view(match=Match("fork", 4, 4, [NEW[0].hash], STORED[3].chain))
    assert (view().kept, view().length) == (6, 7)
    assert (forked.kept, forked.length) == (4, 5)  # an edit: the two after it are cut


def test_a_whole_conversation_starts_where_the_client_sent_its_first_message() -> None:
    # Its first message is transcript[2]: the two before are an earlier chapter.
    later = view(match=Match("full", 6, 4, [NEW[0].hash], STORED[-1].chain))
    assert later.origin == 2
    assert view().origin == 0


def test_a_client_that_sends_only_its_turn_starts_where_the_session_says() -> None:
    appended = view(match=Match("append", 6, 0, [NEW[0].hash], STORED[-1].chain))
    assert appended.origin == 0
    assert replace(appended, base=replace(meta(STORED), origin=4)).origin == 4
    assert replace(appended, base=None).origin == 0


def test_the_chapters_before_the_clients_conversation_are_not_the_clients_to_send() -> None:
    assert view().before_origin(COUNTER) == 0  # no chapter: nothing before
    assert view(base=None, match=Match("new", 0, 0, [], "")).before_origin(COUNTER) == 0
    # The turn that starts a chapter: everything stored so far is before it.
    starting = view(match=Match("chapter", 6, 0, [NEW[0].hash], STORED[-1].chain))
    assert starting.origin == 6 and starting.before_origin(COUNTER) == 60
    # A later turn of the chapter: what the meta says was before it.
    chaptered = replace(meta(STORED), origin=2, origin_totals={COUNTER: 20})
    later = view(base=chaptered, match=Match("full", 6, 4, [NEW[0].hash], STORED[-1].chain))
    assert later.before_origin(COUNTER) == 20
    assert later.before_origin("cl100k_base") == 0  # a tokenizer it was never counted by


# -- planned_turn ---------------------------------------------------------------------


def test_a_turn_says_what_the_conversation_costs_and_what_was_sent() -> None:
    plan = Plan([SYSTEM, *CONVERSATION[3:]], 52, "truncated", None, 3)
    body = {"model": "gpt-4o-mini", "messages": [SYSTEM, *CONVERSATION], "temperature": 0.2}
    turn = planned_turn(body, request(), view(), plan)
    assert turn.body == {"model": "gpt-4o-mini", "messages": plan.messages, "temperature": 0.2}
    assert turn.tokens_original == 7 + 5 + 70  # system, tools and the whole history
    assert turn.tokens_sent == 52
    assert (turn.compression, turn.summary_created) == ("truncated", None)
    assert (turn.managed, turn.key, turn.input_limit) == (True, ("t1", "s"), 1250)
    assert turn.messages_json is None  # cut: the client's bytes are not what goes


def test_an_earlier_chapter_is_not_counted_as_the_clients_conversation() -> None:
    chaptered = replace(meta(STORED), origin=2, origin_totals={COUNTER: 20})
    later = view(base=chaptered, match=Match("full", 6, 4, [NEW[0].hash], STORED[-1].chain))
    turn = planned_turn({"messages": []}, request(), later, whole_plan())
    assert turn.tokens_original == 7 + 5 + 70 - 20


def test_a_session_known_by_its_bound_claims_no_count() -> None:
    bounded = view(totals={BOUND.name: 4000})
    turn = planned_turn({"messages": []}, request(counter=BOUND), bounded, whole_plan())
    assert (turn.tokens_original, turn.tokens_sent) == (None, None)


def test_an_unchanged_conversation_goes_upstream_as_the_bytes_it_came_in() -> None:
    state = view()
    turn = planned_turn({"messages": []}, request(), state, whole_plan())
    assert state.serialized is not None
    assert turn.messages_json is state.serialized.whole
    # Anything else sends the plan's own messages, serialized anew.
    appended = view(match=Match("append", 6, 0, [NEW[0].hash], STORED[-1].chain))
    assert planned_turn({}, request(), appended, whole_plan()).messages_json is None
    assert planned_turn({}, request(), view(serialized=None), whole_plan()).messages_json is None
    fewer = Plan([SYSTEM, *CONVERSATION[1:]], 72, "none", None, 0)
    assert planned_turn({}, request(), state, fewer).messages_json is None


def test_a_summary_turn_says_when_its_summary_was_made() -> None:
    checkpoint = summary()
    plan = Plan(
        [SYSTEM, {"role": "system", "content": "…"}, *CONVERSATION[4:]], 50, "summary", None, 0
    )
    turn = planned_turn({}, request(), view(checkpoint=checkpoint, checkpoints=1), plan)
    assert (turn.compression, turn.summary_created) == ("summary", 1_700_000_123.0)
    # A summary in effect that this plan does not send is not claimed.
    sent_whole = planned_turn({}, request(), view(checkpoint=checkpoint), whole_plan())
    assert sent_whole.summary_created is None


def test_anthropic_cache_marks_are_set_and_the_client_bytes_are_not_relayed() -> None:
    turn = planned_turn({}, request(cache_marks=0), view(), whole_plan())
    marked = [m for m in turn.body["messages"] if "cache_control" in str(m)]
    assert marked and turn.body["messages"] != whole_plan().messages
    assert turn.messages_json is None  # the marks are not in the bytes the client sent


def test_a_sessions_prompt_cache_key_goes_with_its_turn() -> None:
    turn = planned_turn({"model": "m"}, request(cache_key="k" * 16), view(), whole_plan())
    assert turn.body["prompt_cache_key"] == "k" * 16
    assert "prompt_cache_key" not in planned_turn({}, request(), view(), whole_plan()).body
