"""A reply too long to keep is stored as a marked cut that later turns can still use."""

from __future__ import annotations

import orjson

from proxy.conversation.replies import stored_reply
from proxy.facts.statements import statements


def test_a_short_reply_is_kept_as_it_is() -> None:
    reply = {"role": "assistant", "content": "fine"}
    assert stored_reply(reply, 1024) is reply


def test_a_long_reply_keeps_its_start_its_calls_and_says_it_was_cut() -> None:
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"p": 1}'}},
        {
            "id": "call_2",
            "type": "function",
            "function": {"name": "dump", "arguments": "y" * 90_000},
        },
    ]
    reply = {"role": "assistant", "content": "a" * 200_000, "tool_calls": calls, "reasoning": "z"}
    cut = stored_reply(reply, 16 * 1024)
    assert len(orjson.dumps(cut)) <= 16 * 1024
    assert cut["content"].startswith("a" * 1000)
    assert "kept only the start of this" in cut["content"]
    # Every call is still there by id and name, so the tool results that answer it fit.
    assert [c["id"] for c in cut["tool_calls"]] == ["call_1", "call_2"]
    assert [c["function"]["arguments"] for c in cut["tool_calls"]] == ['{"p": 1}', "{}"]
    assert "reasoning" not in cut
    assert list(statements(cut["content"][-80:])) == []  # the mark states no fact
