"""A memory's record: its facts, and which of its sessions said the most."""

from __future__ import annotations

import orjson

from proxy.conversation.tokens import TokenCounter
from proxy.engine.remembering import _SESSIONS_KEPT, Memory
from proxy.memory.facts import MEMORY_RECALL_PREFIX, Remembered, recalled_message


def test_a_record_from_before_sessions_were_kept_still_reads() -> None:
    fact = Remembered("money", "travel budget", "$3,796", 0.6, "monday", 1.0)
    old = orjson.dumps([fact.to_dict()])
    memory = Memory.from_json(old)
    assert memory.facts == [fact] and memory.sessions == {}
    assert Memory.from_json(memory.to_json()) == memory


def test_the_sessions_that_said_the_most_are_kept() -> None:
    memory = Memory(sessions={"planning": 200})
    for number in range(2 * _SESSIONS_KEPT):
        memory = Memory(sessions=memory.said(f"question-{number}", 2))
    assert len(memory.sessions) == _SESSIONS_KEPT
    assert next(iter(memory.sessions)) == "planning"  # searched first, never pushed out
    assert Memory(sessions=memory.said("planning", 10)).sessions["planning"] == 210


def test_units_of_other_conversations_say_when_each_conversation_began() -> None:
    """Issue 52: a unit recalled from another session is read as of its day ("last
    week" there is not this week): each conversation's units come under a line naming
    the day it began, once, in the order they were said."""
    counter = TokenCounter("chars", lambda text: len(text) // 4 + 1)
    march, may = 1_677_834_000.0, 1_683_100_000.0  # 3 March and 3 May 2023, UTC
    units = [
        (7, [{"role": "user", "content": "We moved the lake trip to June."}], None),
        (2, [{"role": "user", "content": "The lake trip is in May, I booked last week."}], None),
        (9, [{"role": "user", "content": "Packed the tent for the lake."}], None),
    ]
    block = recalled_message(units, [], counter, 10_000, [(may, 7), (march, 2), (may, 9)])
    assert block is not None
    shown = str(block["content"]).removeprefix(MEMORY_RECALL_PREFIX).split("\n\n")
    assert shown == [
        "[a conversation begun 3 March 2023]",
        "[message 2] user: The lake trip is in May, I booked last week.",
        "[a conversation begun 3 May 2023]",
        "[message 7] user: We moved the lake trip to June.",
        "[message 9] user: Packed the tent for the lake.",
    ]
