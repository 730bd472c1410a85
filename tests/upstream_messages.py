"""The test upstream's Anthropic Messages API (`POST /v1/messages`): what LiteLLM
sends to an `anthropic/…` deployment, answered in Anthropic's own shapes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

from tests.prompt_cache import Block, anthropic_ttl


class Faults(Protocol):
    """How a scripted stream goes wrong (`tests.upstream.Reply`'s fields): after
    `fail_after_chunks` events it ends by `stream_end` ("clean": the connection closes
    cleanly; "garbage": an event of no JSON, then it closes; "error": the API's own
    error event saying `error_message`, then it closes; else it is reset); after
    `stall_after_chunks` events it stalls for `stall_seconds`."""

    fail_after_chunks: int | None
    stream_end: str
    stall_after_chunks: int | None
    stall_seconds: float
    error_message: str


async def scripted(
    events: list[bytes], faults: Faults | None, error: Callable[[str, int], bytes] | None = None
) -> AsyncIterator[bytes]:
    """`events` sent as `faults` say (all of them, in order, when None); `error` makes
    the API's error event of a message, as the event numbered so."""
    cut = faults.fail_after_chunks if faults is not None else None
    stall = faults.stall_after_chunks if faults is not None else None
    for index, item in enumerate(events):
        if faults is not None and index == stall:
            await asyncio.sleep(faults.stall_seconds)
        if faults is not None and cut is not None and index >= cut:
            if faults.stream_end == "clean":
                return
            if faults.stream_end == "garbage":
                yield b"data: {this is not json\n\n"
                return
            if faults.stream_end == "error" and error is not None:
                yield error(faults.error_message, index)
                return
            raise ConnectionResetError("test upstream drops the stream")
        yield item


def kinds(events: list[bytes]) -> list[str]:
    """Each event's kind (its `event:` line), in order."""
    return [item.split(b"\n", 1)[0].removeprefix(b"event: ").decode() for item in events]


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


# Claude models that take a system message mid-conversation where it stands (LiteLLM's
# map calls this `supports_mid_conversation_system`): Claude 4.8 and the 5 family.
MID_CONVERSATION_SYSTEM = ("claude-opus-4-8", "claude-sonnet-5", "claude-opus-5", "claude-fable-5")


def misplaced_system(body: dict[str, Any]) -> str | None:
    """Anthropic's refusal of a `system` role in `messages`: first, on every model (the
    top-level `system` field is for that); anywhere, on a model before Claude 4.8."""
    roles = [m.get("role") for m in body.get("messages", []) if isinstance(m, dict)]
    if roles[:1] == ["system"]:
        return "messages.0: use the top-level 'system' parameter for the initial system prompt"
    model = str(body.get("model"))
    if "system" in roles and not model.startswith(MID_CONVERSATION_SYSTEM):
        return f"messages.{roles.index('system')}: role 'system' is not supported on this model"
    return None


def prompt_blocks(body: dict[str, Any], encode: Callable[[str], Sequence[int]]) -> list[Block]:
    """The prompt as Anthropic's cache sees it: each tool, each system block, each
    message's content blocks (the first with its role), in order, every one marked with
    its `cache_control`'s TTL; a block's tokens are its JSON's without the mark (a
    string content is its one text block: the same tokens)."""

    def block(value: dict[str, Any], prefix: str = "") -> Block:
        bare = {k: v for k, v in value.items() if k != "cache_control"}
        return Block(encode(prefix + json.dumps(bare)), anthropic_ttl(value.get("cache_control")))

    def parts(content: Any) -> list[dict[str, Any]]:
        """A string is the one text block Anthropic reads it as."""
        if isinstance(content, str):
            return [{"type": "text", "text": content}] if content else []
        return [part for part in content or [] if isinstance(part, dict)]

    out = [block(tool) for tool in body.get("tools") or []]
    out += [block(part) for part in parts(body.get("system"))]
    for message in body.get("messages") or []:
        role = str(message.get("role"))
        blocks = parts(message.get("content"))
        out += [block(part, f"{role}: " if n == 0 else "") for n, part in enumerate(blocks)]
    return out


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


def message_events(reply: dict[str, Any], faults: Faults | None = None) -> AsyncIterator[bytes]:
    """Anthropic's event sequence for `reply` (`message_sequence`), as `faults` say."""
    return scripted(message_sequence(reply), faults, error_event)


def error_event(message: str, number: int = 0) -> bytes:
    """Anthropic's error event (`overloaded_error` and the like arrive so mid-stream)."""
    return event("error", {"error": {"type": "api_error", "message": message}})


def message_sequence(reply: dict[str, Any]) -> list[bytes]:
    """Anthropic's event sequence for `reply`: the input's usage (cache reads and writes
    too) in `message_start`, text in word deltas, tool input in two JSON pieces, a
    thinking block's text then its signature, the whole usage in `message_delta`."""
    start = reply | {"content": [], "stop_reason": None}
    start["usage"] = reply["usage"] | {"output_tokens": 1}  # the input's, cache included
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
    # The whole usage again, cumulative, as Anthropic's message_delta now carries it.
    events.append(event("message_delta", {"delta": delta, "usage": reply["usage"]}))
    events.append(event("message_stop", {}))
    return events
