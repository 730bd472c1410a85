"""A memory's record: its facts, and which of its sessions said the most."""

from __future__ import annotations

import orjson

from proxy.engine.remembering import _SESSIONS_KEPT, Memory
from proxy.memory.facts import Remembered


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
