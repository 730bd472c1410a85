"""The test upstream's OpenAI Responses API (`POST /v1/responses`): what LiteLLM sends
to an `openai/…` deployment on its Responses route, answered in OpenAI's own shapes."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from tests.upstream_messages import Faults, scripted


def last_user_text(body: dict[str, Any]) -> str:
    """The last user message's text (`input` as a string, or its items)."""
    source = body.get("input")
    if isinstance(source, str):
        return source
    for item in reversed(source or []):
        if item.get("type", "message") != "message" or item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, str):
            return content
        return " ".join(p.get("text", "") for p in content if p.get("type") == "input_text")
    return ""


def prompt_tokens(body: dict[str, Any], encode: Callable[[str], Sequence[int]]) -> list[int]:
    """The prompt's tokens in order (tools, instructions, each input item's JSON): what
    OpenAI's automatic cache compares."""
    out = list(encode(json.dumps(body["tools"]))) if body.get("tools") else []
    out += encode(str(body.get("instructions") or ""))
    source = body.get("input")
    items = [source] if isinstance(source, str) else source or []
    for item in items:
        out += encode(item if isinstance(item, str) else json.dumps(item))
    return out


def output(
    number: int,
    content: str | None,
    tool_calls: list[dict[str, Any]] | None,
    before: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Output items: `before` (reasoning, say), the text as a message, the calls."""
    items = [dict(item) for item in before]
    if content:
        part = {"type": "output_text", "text": content, "annotations": []}
        items.append(
            {
                "type": "message",
                "id": f"msg_test_{number}",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
        )
    for call in tool_calls or []:
        function = call["function"]
        items.append(
            {
                "type": "function_call",
                "id": f"fc_test_{number}",
                "call_id": call["id"],
                "name": function["name"],
                "arguments": function["arguments"],
                "status": "completed",
            }
        )
    return items


def response(number: int, body: dict[str, Any], items: list[dict[str, Any]], usage: dict) -> dict:
    return {
        "id": f"resp_test_{number}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": body.get("model"),
        "output": items,
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "usage": usage,
    }


def event(kind: str, data: dict[str, Any], number: int) -> bytes:
    payload = {"type": kind, "sequence_number": number, **data}
    return f"event: {kind}\ndata: {json.dumps(payload)}\n\n".encode()


def response_events(reply: dict[str, Any], faults: Faults | None = None) -> AsyncIterator[bytes]:
    """OpenAI's event sequence for `reply` (`response_sequence`), as `faults` say."""
    return scripted(response_sequence(reply), faults, error_event)


def error_event(message: str, number: int) -> bytes:
    """OpenAI's `error` event of a Responses stream."""
    return event("error", {"code": "server_error", "message": message, "param": None}, number)


def response_sequence(reply: dict[str, Any]) -> list[bytes]:
    """OpenAI's event sequence for `reply`: text in word deltas inside its content part
    (as the openai SDK's stream accumulates it), call arguments in two pieces, other
    items whole."""
    started = reply | {"status": "in_progress", "output": [], "usage": None}
    events = [
        ("response.created", {"response": started}),
        ("response.in_progress", {"response": started}),
    ]
    for index, item in enumerate(reply["output"]):
        kind = item["type"]
        if kind == "message":
            events.append(
                (
                    "response.output_item.added",
                    {"output_index": index, "item": item | {"content": []}},
                )
            )
            text = item["content"][0]["text"]
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            empty = {"type": "output_text", "text": "", "annotations": []}
            events.append(("response.content_part.added", where | {"part": empty}))
            for n, word in enumerate(text.split(" ")):
                events.append(
                    ("response.output_text.delta", where | {"delta": (" " if n else "") + word})
                )
            events.append(("response.output_text.done", where | {"text": text}))
            events.append(("response.content_part.done", where | {"part": item["content"][0]}))
        elif kind == "function_call":
            events.append(
                (
                    "response.output_item.added",
                    {"output_index": index, "item": item | {"arguments": ""}},
                )
            )
            middle = len(item["arguments"]) // 2
            for piece in (item["arguments"][:middle], item["arguments"][middle:]):
                delta = {"item_id": item["id"], "output_index": index, "delta": piece}
                events.append(("response.function_call_arguments.delta", delta))
        else:
            events.append(("response.output_item.added", {"output_index": index, "item": item}))
        events.append(("response.output_item.done", {"output_index": index, "item": item}))
    events.append(("response.completed", {"response": reply}))
    return [event(kind, data, number) for number, (kind, data) in enumerate(events)]
