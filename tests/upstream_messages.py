"""The test upstream's Anthropic Messages API (`POST /v1/messages`): what LiteLLM
sends to an `anthropic/…` deployment, answered in Anthropic's own shapes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any


def last_user_text(body: dict[str, Any]) -> str:
    """The last user message's text blocks (tool results are not text)."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [b.get("text", "") for b in content if b.get("type") == "text"]
        if texts:
            return " ".join(texts)
    return ""


def message_blocks(
    content: str | None, tool_calls: list[dict[str, Any]] | None, thinking: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    blocks = [dict(block) for block in thinking]
    if content:
        blocks.append({"type": "text", "text": content})
    for call in tool_calls or []:
        function = call["function"]
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": function["name"],
                "input": json.loads(function["arguments"] or "{}"),
            }
        )
    return blocks


def message(
    message_id: str, model: str, blocks: list[dict[str, Any]], usage: dict[str, int]
) -> dict[str, Any]:
    tool = any(block["type"] == "tool_use" for block in blocks)
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": "tool_use" if tool else "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


def event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


async def message_events(
    reply: dict[str, Any], fail_after: int | None = None
) -> AsyncIterator[bytes]:
    """Anthropic's event sequence for `reply`: text in word deltas, tool input in two
    JSON pieces, a thinking block's text then its signature."""
    start = reply | {"content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": reply["usage"]["input_tokens"], "output_tokens": 1}
    events = [event("message_start", {"message": start})]
    for index, block in enumerate(reply["content"]):
        kind = block["type"]
        if kind == "text":
            first, deltas = {"type": "text", "text": ""}, []
            words = block["text"].split(" ")
            for n, word in enumerate(words):
                deltas.append({"type": "text_delta", "text": word if n == 0 else " " + word})
        elif kind == "tool_use":
            first = block | {"input": {}}
            text = json.dumps(block["input"])
            middle = len(text) // 2
            deltas = [
                {"type": "input_json_delta", "partial_json": text[:middle]},
                {"type": "input_json_delta", "partial_json": text[middle:]},
            ]
        elif kind == "thinking":
            first = {"type": "thinking", "thinking": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        else:  # redacted_thinking comes whole
            first, deltas = block, []
        events.append(event("content_block_start", {"index": index, "content_block": first}))
        events += [event("content_block_delta", {"index": index, "delta": d}) for d in deltas]
        events.append(event("content_block_stop", {"index": index}))
    delta = {"stop_reason": reply["stop_reason"], "stop_sequence": None}
    usage = {"output_tokens": reply["usage"]["output_tokens"]}
    events.append(event("message_delta", {"delta": delta, "usage": usage}))
    events.append(event("message_stop", {}))
    for index, item in enumerate(events):
        if fail_after is not None and index >= fail_after:
            raise ConnectionResetError("test upstream drops the stream")
        yield item
