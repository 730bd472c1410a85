"""Plan records (`proxy.engine.records.plan_record`): what the session viewer and
`GET /v1/sessions/{id}/plans` say a turn sent. Each part is checked by hand against the
plan it records: the summary by number and span, the verbatim window by its range in
the transcript, the inserted blocks, and tokens that add up to what was sent; a record
names messages by reference, so it stays small however long the session."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from proxy.conversation.tokens import BOUND, TokenCounter
from proxy.engine.planner.reconcile import Match
from proxy.engine.planner.window import Plan, omitted_message
from proxy.engine.records import plan_record
from proxy.engine.types import Request, SessionView, Turn, planned_turn
from proxy.sessions.records import Checkpoint, StoredMessage
from tests.clock import Clock
from tests.unit.planned import TOKENIZER
from tests.unit.sessions_factory import COUNTER, entries, meta

Message = dict[str, Any]
SYSTEM = {"role": "system", "content": "Be brief."}
SUMMARY = {"role": "system", "content": "Summary of the earlier conversation: hello."}


def session(length: int) -> tuple[list[StoredMessage], StoredMessage]:
    """`length - 1` stored messages and the request's new one (10 tokens each)."""
    stored = entries(*(f"message {i}" for i in range(length - 1)))
    [new] = entries("the latest question", start=length - 1, head=stored[-1].chain)
    return stored, new


def turn_of(
    plan: Plan,
    length: int = 7,
    checkpoint: Checkpoint | None = None,
    counter: TokenCounter = TOKENIZER,
    **changes: Any,
) -> Turn:
    """A turn of a session of `length` messages (the last one new) planned by `plan`,
    with system messages and tools counted 12 tokens."""
    stored, new = session(length)
    conversation = [s.message for s in (*stored, new)]
    request = Request(
        model="gpt-4o-mini",
        counter=counter,
        budget=800,
        input_limit=1000,
        messages=[SYSTEM, *conversation],
        system=[SYSTEM],
        conversation=conversation,
        system_tokens=7,
        tools_tokens=5,
        mode="auto",
        key=("t1", "s"),
        size=None,
        memory_id="m1",
    )
    state = SessionView(
        base=meta(stored),
        match=Match("full", length - 1, length - 1, [new.hash], stored[-1].chain),
        new=(new,),
        totals={COUNTER: 10 * length},
        checkpoint=checkpoint,
        checkpoints=2 if checkpoint is not None else 0,
        expected_version=1,
        serialized=None,
    )
    state = replace(state, **changes)
    return planned_turn({}, request, state, plan)


def conversation(length: int = 7) -> list[Message]:
    stored, new = session(length)
    return [s.message for s in (*stored, new)]


def summary(covers: int = 4, pinned: tuple[str, ...] = ()) -> Checkpoint:
    """A summary of three segments over the first `covers` messages."""
    chain = session(7)[0][covers - 1].chain
    return Checkpoint(
        covers, chain, ("one", "two", "three"), 9, "m", 1.0, {COUNTER: 40}, pinned=pinned
    )


def test_a_whole_conversation_is_recorded_as_the_system_part_and_the_window() -> None:
    plan = Plan([SYSTEM, *conversation()], 85, "none", None, 0)
    clock = Clock(1_700_000_000.12345)
    record = plan_record(turn_of(plan), plan, 0, 0, clock)
    assert record == {
        "at": 1_700_000_000.123,  # rounded to the millisecond
        "model": "gpt-4o-mini",
        "budget": 800,
        "compression": "none",
        "tokens_original": 7 + 5 + 70,
        "tokens_sent": 85,
        "tokens_saved": 0,  # more was sent than counted (the reply's priming): none saved
        "parts": [
            {"kind": "system", "tokens": 12},
            {"kind": "window", "tokens": 85 - 12, "range": [0, 7], "dropped": 0},
        ],
    }


def test_a_summary_is_recorded_by_its_number_and_span_and_its_pinned_facts_apart() -> None:
    checkpoint = summary(4, pinned=("the code is 4471", "Ines keeps it"))
    plan = Plan([SYSTEM, SUMMARY, *conversation()[4:]], 60, "summary", None, 0)
    record = plan_record(turn_of(plan, checkpoint=checkpoint), plan, 18, 6)
    assert record["compression"] == "summary"
    assert record["tokens_saved"] == 82 - 60
    assert record["parts"] == [
        {"kind": "system", "tokens": 12},
        {"kind": "summary", "tokens": 18 - 6, "checkpoint": 2, "covers": [0, 4], "segments": 3},
        {"kind": "pinned", "tokens": 6, "facts": 2, "checkpoint": 2},
        {"kind": "window", "tokens": 60 - 12 - 18, "range": [4, 7], "dropped": 0},
    ]
    assert sum(part["tokens"] for part in record["parts"]) == record["tokens_sent"]


def test_messages_dropped_without_a_summary_are_counted_and_left_out_of_the_range() -> None:
    plan = Plan([SYSTEM, omitted_message(4), *conversation()[4:]], 45, "truncated", None, 4)
    record = plan_record(turn_of(plan), plan, 0, 0)
    window = record["parts"][-1]
    assert window == {"kind": "window", "tokens": 45 - 12, "range": [4, 7], "dropped": 4}


def test_inserted_blocks_are_recorded_with_the_units_they_show() -> None:
    window = Plan([SYSTEM, omitted_message(3), *conversation()[3:]], 52, "truncated", None, 3)
    remembered = {"role": "system", "content": "Remembered: the code is 4471."}
    recalled = {"role": "user", "content": "Recalled: message 1."}
    plan = window.with_message(1, remembered, 9, "memory").with_message(
        6, recalled, 11, "recall", [1]
    )
    record = plan_record(turn_of(plan), plan, 0, 0)
    assert record["parts"] == [
        {"kind": "system", "tokens": 12},
        {"kind": "memory", "tokens": 9, "units": [], "memory_id": "m1"},
        {"kind": "recall", "tokens": 11, "units": [1]},
        # 72 sent: the blocks' 20 and the system's 12 are not the window's.
        {"kind": "window", "tokens": 72 - 12 - 20, "range": [3, 7], "dropped": 3},
    ]
    assert sum(part["tokens"] for part in record["parts"]) == 72 == record["tokens_sent"]


def test_a_summary_not_sent_is_not_recorded() -> None:
    # A chapter's checkpoint has no text: nothing of it is sent, even over the budget.
    chapter = Checkpoint(4, session(7)[0][3].chain, (), 0, "", 1.0, {COUNTER: 40})
    plan = Plan([SYSTEM, omitted_message(1), *conversation()[5:]], 40, "truncated", None, 1)
    parts = plan_record(turn_of(plan, checkpoint=chapter), plan, 0, 0)["parts"]
    assert [part["kind"] for part in parts] == ["system", "window"]
    assert parts[-1]["range"] == [5, 7]
    # A summary that would cost more than what it covers: the conversation goes whole.
    whole = Plan([SYSTEM, *conversation()], 85, "none", None, 0)
    parts = plan_record(turn_of(whole, checkpoint=summary()), whole, 0, 0)["parts"]
    assert [part["kind"] for part in parts] == ["system", "window"]
    assert parts[-1]["range"] == [0, 7]


def test_a_session_sent_whole_by_its_bound_records_no_counts() -> None:
    plan = Plan([SYSTEM, *conversation()], 400, "none", None, 0)
    turn = turn_of(plan, counter=BOUND, totals={BOUND.name: 388})
    record = plan_record(turn, plan, 0, 0)
    assert (record["tokens_original"], record["tokens_sent"], record["tokens_saved"]) == (
        None,
        None,
        0,
    )
    assert [part["tokens"] for part in record["parts"]] == [None, None]
    assert record["parts"][-1]["range"] == [0, 7]


def test_a_record_names_messages_by_reference_so_it_stays_small() -> None:
    sizes = []
    for length in (7, 5001):
        messages = conversation(length)
        plan = Plan([SYSTEM, SUMMARY, *messages[-4:]], 60, "summary", None, 0)
        record = plan_record(turn_of(plan, length, checkpoint=summary()), plan, 18, 0)
        serialized = orjson.dumps(record)
        assert b"message " not in serialized and b"latest question" not in serialized
        sizes.append(len(serialized))
    assert sizes[1] - sizes[0] < 16  # a few more digits in the range and the counts
    assert sizes[1] < 400
