"""An Anthropic deployment's own stream (`proxy.upstream.native`), read as chat chunks
for the engine while its events are relayed to the client as they came."""

from __future__ import annotations

from typing import Any

from proxy.doors.anthropic.response import (
    ERROR_STATUS,
    arguments,
    finish_reason,
    native_content,
    tool_call,
    usage_as_chat,
)
from proxy.doors.anthropic.stream import event
from proxy.doors.base import UNTYPED_EVENT
from proxy.errors import UpstreamFailure
from proxy.upstream.failures import said_in

__all__ = ["MessagesEvents"]


class MessagesEvents:
    """Anthropic's stream read as chat chunks: text, thinking pieces then the signature,
    tool calls by their order; the finish only on `message_stop`, the stream's own end.
    The blocks are kept whole too, for a turn the chat form cannot hold."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._calls = 0
        self._input: dict[str, Any] = {}
        self._stop: str | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._pieces: dict[tuple[Any, str], list[str]] = {}  # (block, field) -> pieces

    def event(self, kind: str, data: dict[str, Any], raw: bytes) -> tuple[bytes, list[dict]]:
        delta: dict[str, Any] = {}
        chunks: list[dict[str, Any]] = []
        if not kind:  # every event of the API names its type: this one is no part of it
            raise UpstreamFailure(UNTYPED_EVENT)
        if kind == "error":
            error = data.get("error")
            said = said_in(data) or "The provider's stream failed."
            named = error.get("type") if isinstance(error, dict) else None
            raise UpstreamFailure(said, provider_status=ERROR_STATUS.get(str(named)))
        if kind == "message_start":
            message = (data.get("message") or {}) | {"model": self._model}  # as asked for
            self._input = message.get("usage") or {}
            raw = event(kind, {k: v for k, v in data.items() if k != "type"} | {"message": message})
        elif kind == "content_block_start":
            block = data.get("content_block") or {}
            self._blocks[data.get("index", len(self._blocks))] = dict(block)
            if block.get("type") == "tool_use":
                call = tool_call(block.get("id"), block.get("name"), None) | {"index": self._calls}
                call["function"]["arguments"] = ""
                delta = {"tool_calls": [call]}
                self._calls += 1
            elif block.get("type") == "redacted_thinking":
                delta = {"thinking_blocks": [block]}
            elif block.get("type") == "text" and block.get("text"):
                delta = {"content": block["text"]}
        elif kind == "content_block_delta":
            change = data.get("delta") or {}
            self._grow(data.get("index"), change)
            delta = _delta(change, self._calls - 1)
        elif kind == "message_delta":
            self._stop = (data.get("delta") or {}).get("stop_reason")
            given = {k: v for k, v in (data.get("usage") or {}).items() if v is not None}
            used = usage_as_chat(self._input | given)
            chunks.append({"choices": [], "usage": used})
        elif kind == "message_stop":
            finish = finish_reason(self._stop)
            fields = native_content(self._whole())
            end = {"message_fields": fields} if fields else {}
            chunks.append({"choices": [{"index": 0, "delta": end, "finish_reason": finish}]})
        if delta:
            chunks.insert(0, {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        return raw, chunks

    def _grow(self, index: Any, change: dict[str, Any]) -> None:
        """Keep a block's pieces as they come (joined once, at the end)."""
        block = self._blocks.get(index)
        if block is None:
            return
        kind = change.get("type")
        field, key = _PIECES.get(str(kind), ("", ""))
        if field:
            self._pieces.setdefault((index, field), []).append(change.get(key) or "")
        elif kind == "signature_delta":
            block["signature"] = change.get("signature")
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(change.get("citation"))

    def _whole(self) -> list[dict[str, Any]]:
        for (index, field), pieces in self._pieces.items():
            block = self._blocks[index]
            if field == "input":
                block["input"] = arguments("".join(pieces))
            else:
                block[field] = (block.get(field) or "") + "".join(pieces)
        return [self._blocks[index] for index in sorted(self._blocks)]


# A delta's kind -> the block field its pieces make, and the delta's key for a piece.
_PIECES = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "thinking"),
    "input_json_delta": ("input", "partial_json"),
}


def _delta(delta: dict[str, Any], call: int) -> dict[str, Any]:
    kind = delta.get("type")
    if kind == "text_delta":
        return {"content": delta.get("text") or ""}
    if kind == "input_json_delta":
        arguments = {"arguments": delta.get("partial_json") or ""}
        return {"tool_calls": [{"index": call, "function": arguments}]}
    if kind == "thinking_delta":
        return {"thinking_blocks": [{"type": "thinking", "thinking": delta.get("thinking")}]}
    if kind == "signature_delta":
        return {"thinking_blocks": [{"type": "thinking", "signature": delta.get("signature")}]}
    return {}
