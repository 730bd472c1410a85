"""Agents' own compactions (Claude Code's `/compact`, Codex) as their requests show them,
pure: a request for a summary, then a new conversation that opens with it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

from proxy.conversation.identity import Message
from proxy.summary.fold import render_transcript

__all__ = [
    "REQUEST",
    "RESUMED",
    "answer",
    "answer_chunks",
    "asks_to_compact",
    "restarts",
    "resumes",
]

# The proxy's own request for a summary (OpenAI's `responses/compact`), and the opening
# of the summary it answers with, which the compacted conversation goes on from.
REQUEST = (
    "Summarize the conversation so far for whoever goes on with it: what was asked, "
    "decided and done, what is still open, and every name, number and path it needs."
)
RESUMED = "This conversation goes on from a summary of its earlier part:\n\n"
# The openings of the agents' own prompts (Claude Code 2.1, Codex 0.169), and ours.
_REQUESTS = (
    "Your task is to create a detailed summary of the conversation so far",
    "You are performing a CONTEXT CHECKPOINT COMPACTION",
    REQUEST[:60],
)
_RESUMED = (
    "This session is being continued from a previous conversation",
    "Another language model started to solve this problem and produced a summary",
    RESUMED.strip(),
)
# Any other client's: a first message that says it is a summary, near its start.
_SUMMARY = ("summary", "Summary", "SUMMARY", "summarized", "previous conversation")
_HEAD = 400


def asks_to_compact(message: Any) -> bool:
    """`message` is an agent's request for a summary of its conversation."""
    return _says(message, _REQUESTS)


def resumes(messages: Sequence[Any]) -> bool:
    """One of `messages` opens a conversation an agent went on with from its summary."""
    return any(_says(message, _RESUMED) for message in messages)


def restarts(conversation: Sequence[Any]) -> bool:
    """Whether `conversation`, which shares no first message with its session's, replaces the
    history with a summary of it (an agent's opening, or any summary in its first message)."""
    if len(conversation) < 2:  # only its new turn: a client that sends no history
        return False
    return resumes(conversation[:3]) or _says(conversation[0], _SUMMARY, head=_HEAD)


class _Counter(Protocol):
    def count_text(self, text: str) -> int: ...


def answer(
    summary: str, recent: Sequence[Message], model: str, counter: _Counter
) -> dict[str, Any]:
    """The reply to a request for a summary, made of the session's summary and the messages
    after what it covers (`recent`), whose usage counts no prompt tokens: no model read any."""
    text = summary
    if recent:
        text += "\n\nThe latest messages, as they were:\n\n" + render_transcript(list(recent))
    tokens = counter.count_text(text)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": tokens, "total_tokens": tokens},
    }


def answer_chunks(completion: dict[str, Any]) -> list[dict[str, Any]]:
    """`answer`'s completion as a stream's chunks: the text, the finish, the usage."""
    head = {k: completion[k] for k in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    return [
        head | {"choices": [{"index": 0, "delta": choice["message"], "finish_reason": None}]},
        head | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
        head | {"choices": [], "usage": completion["usage"]},
    ]


def _says(message: Any, openings: tuple[str, ...], head: int | None = None) -> bool:
    if not isinstance(message, dict) or message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, str):
        texts = [content]
    elif isinstance(content, list):
        texts = [
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
    else:
        return False
    if head is not None:  # only the start of its first text
        texts = [text[:head] for text in texts[:1]]
    return any(opening in text for text in texts for opening in openings)
