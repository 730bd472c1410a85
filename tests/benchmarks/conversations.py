"""Synthetic conversations as a full-resend client sends them, turn by turn.

The test upstream answers "echo: <last user message>", so every reply is known in
advance and the bodies of a whole conversation can be built before timing starts.
"""

from __future__ import annotations

from typing import Any

import orjson

from tests.benchmarks.load import Call

MODEL = "bench-model"
SESSION_HEADER = "X-Session-Id"
SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
# About 280 bytes a message: 5,000 of them make the 1.4 MB body.
_FILLER = (
    "The quarterly report lists revenue, costs and the hiring plan; please check the "
    "figures against last year's numbers and flag anything that moved by more than ten "
    "percent, with a short note on why it may have changed and who owns it."
)


def user_text(conversation: str, turn: int) -> str:
    return f"[{conversation} turn {turn}] {_FILLER}"


def history(conversation: str, messages: int) -> list[dict[str, Any]]:
    """A conversation of `messages` messages ending with a user turn (system not counted)."""
    result: list[dict[str, Any]] = []
    if messages % 2 == 0:  # an even count opens with the assistant's greeting
        result.append({"role": "assistant", "content": f"[{conversation}] Hello! {_FILLER}"})
    turn = 0
    while len(result) < messages:
        text = user_text(conversation, turn)
        result.append({"role": "user", "content": text})
        if len(result) < messages:
            result.append({"role": "assistant", "content": f"echo: {text}"})
        turn += 1
    return result


def turns(
    conversation: str, start_messages: int, count: int, *, session: bool, stream: bool = False
) -> list[Call]:
    """`count` consecutive requests of one conversation: the first sends `start_messages`
    messages, each later one adds the echoed reply and a new user message."""
    messages = history(conversation, start_messages)
    calls = []
    for turn in range(count):
        if turn:
            reply = {"role": "assistant", "content": f"echo: {messages[-1]['content']}"}
            messages += [reply, {"role": "user", "content": user_text(conversation, 10_000 + turn)}]
        body: dict[str, Any] = {"model": MODEL, "messages": [SYSTEM, *messages]}
        if stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        headers = {SESSION_HEADER: conversation} if session else {}
        calls.append(Call(orjson.dumps(body), headers))
    return calls
