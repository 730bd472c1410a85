"""Agents' compaction requests, and the answer made from the session's summary."""

from __future__ import annotations

from typing import Any

from proxy.conversation.replies import StreamedReply, reply_message
from proxy.engine.planner.agent_compaction import answer, answer_chunks, asks_to_compact, restarts


class Words:
    def count_text(self, text: str) -> int:
        return len(text.split())


def test_the_agents_own_compaction_prompts_are_recognised() -> None:
    claude = "Your task is to create a detailed summary of the conversation so far, paying"
    codex = [{"type": "text", "text": "You are performing a CONTEXT CHECKPOINT COMPACTION."}]
    assert asks_to_compact({"role": "user", "content": claude})
    assert asks_to_compact({"role": "user", "content": codex})
    assert not asks_to_compact({"role": "assistant", "content": claude})  # said, not asked
    assert not asks_to_compact({"role": "user", "content": "summarize this file for me"})


def test_a_conversation_that_opens_with_a_summary_restarts_only_with_more_after_it() -> None:
    summary = {"role": "user", "content": "Summary of our work so far: the parser is done."}
    assert restarts([summary, {"role": "user", "content": "go on"}])
    assert not restarts([summary])  # a client that sends only its new turn


def test_the_answer_is_the_summary_then_the_latest_messages_as_they_were() -> None:
    recent: list[dict[str, Any]] = [
        {"role": "user", "content": "turn 9"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
    ]
    made = answer("The parser is done.", recent, "gpt-5.5", Words())
    text = made["choices"][0]["message"]["content"]
    assert text.startswith("The parser is done.\n\nThe latest messages, as they were:")
    assert "user: turn 9" in text and "called tool ls({})" in text
    assert "tool result (ls): a.py" in text
    assert made["usage"] == {
        "prompt_tokens": 0,  # no model read anything
        "completion_tokens": len(text.split()),
        "total_tokens": len(text.split()),
    }
    assert reply_message(made) == {"role": "assistant", "content": text}


def test_with_nothing_after_the_summary_the_answer_is_the_summary() -> None:
    made = answer("All of it.", [], "m", Words())
    assert made["choices"][0]["message"]["content"] == "All of it."


def test_the_streamed_answer_carries_the_same_reply_and_usage() -> None:
    made = answer("The parser is done.", [{"role": "user", "content": "go"}], "m", Words())
    chunks = answer_chunks(made)
    streamed = StreamedReply()
    for chunk in chunks:
        streamed.add(chunk)
    assert streamed.message() == reply_message(made)
    assert chunks[-1]["usage"] == made["usage"] and not chunks[-1]["choices"]
    assert {chunk["id"] for chunk in chunks} == {made["id"]}
