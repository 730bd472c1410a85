"""A scripted 300-turn conversation through a 4,096-token model, shared by the test that
checks it end to end and the context benchmark that measures it.

Notes with ticket numbers, a tool round trip every ten turns, a long paste now and then;
the upstream answers briefly, and answers the summarizer with a summary that names the
newest turn it folded in.
"""

from __future__ import annotations

import json
import re
from typing import Any

import openai

from proxy.summary.fold import SYSTEM_PROMPT
from tests.summarizing import as_apart, asks_summary
from tests.upstream import Reply

TURNS = 300
WINDOW = 4096
BUDGET = int(0.8 * WINDOW)
SYSTEM = {"role": "system", "content": "You keep a project log. Be brief."}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Look up an order by id",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    }
]
TAG = re.compile(r"\bturn-(\d{3})\b")


def user_text(turn: int) -> str:
    text = f"turn-{turn:03d}: note {turn} for the project log, ticket PRJ-{1000 + turn}."
    if turn % 25 == 7:  # now and then a long paste
        text += " " + " ".join(f"line{turn}-{i} value={i * 37 % 101}" for i in range(250))
    return text


def tool_call(turn: int) -> dict[str, Any]:
    arguments = json.dumps({"order_id": f"O-{turn}"})
    function = {"name": "lookup_order", "arguments": arguments}
    return {"id": f"call_{turn}", "type": "function", "function": function}


def respond(body: dict[str, Any]) -> str | Reply:
    if asks_summary(body):  # apart or continuing the session's prompt: answered alike
        body = as_apart(body)
    messages = body["messages"]
    if messages[0].get("content") == SYSTEM_PROMPT:
        prompt = messages[-1]["content"]
        turns = sorted({int(t) for t in TAG.findall(new_part(prompt))})
        return f"Summary so far: the user logged notes up to turn {max(turns, default=0)}."
    last = messages[-1]
    if last["role"] == "user" and int(TAG.match(last["content"]).group(1)) % 10 == 3:
        return Reply(tool_calls=[tool_call(int(TAG.match(last["content"]).group(1)))])
    return f"Logged ({len(messages)} messages in context)."


def new_part(prompt: str) -> str:
    """The part of a summarizer prompt that is new messages (not the previous summary)."""
    return prompt.split("</previous_summary>")[-1]


def is_summarizer(body: dict[str, Any]) -> bool:
    return asks_summary(body)


def run(
    client: openai.OpenAI,
    model: str,
    turns: int = TURNS,
    sent: list[list[dict[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    """Drive the conversation as a full-resend client; the whole history it holds.
    `sent` receives the messages of every request, as the client sent them."""
    history: list[dict[str, Any]] = []
    sent = sent if sent is not None else []
    for turn in range(turns):
        history.append({"role": "user", "content": user_text(turn)})
        if turn % 10 == 3:  # a tool round trip
            call = tool_call(turn)
            sent.append([SYSTEM, *history])
            reply = client.chat.completions.create(
                model=model, messages=[SYSTEM, *history], tools=TOOLS
            )
            assert reply.choices[0].message.tool_calls[0].id == f"call_{turn}"
            history.append({"role": "assistant", "content": None, "tool_calls": [call]})
            history.append(
                {
                    "role": "tool",
                    "tool_call_id": f"call_{turn}",
                    "content": f"order O-{turn}: shipped",
                }
            )
        sent.append([SYSTEM, *history])
        reply = client.chat.completions.create(
            model=model, messages=[SYSTEM, *history], tools=TOOLS
        )
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    return history
