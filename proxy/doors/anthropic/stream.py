"""Anthropic's streaming event sequence, made from the upstream's chat chunks.

`message_start`, then for each content block `content_block_start`, its deltas and
`content_block_stop`, then `message_delta` (stop reason, usage) and `message_stop`.
A failure mid-stream is an `error` event and no `message_stop`.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.doors.anthropic.response import error_body, message_id, messages_usage, stop_reason
from proxy.doors.base import ErrorReply

__all__ = ["MessagesFramer", "event"]


def event(kind: str, data: dict[str, Any]) -> bytes:
    """One server-sent event of Anthropic's: its type named twice, as the API does."""
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data}) + b"\n\n"


class MessagesFramer:
    """One streamed reply: tracks the open content block and what the end reports."""

    def __init__(self, model: str, input_tokens: int) -> None:
        self._model = model
        self._input_tokens = input_tokens
        self._started = False
        self._index = -1  # the open block's index
        self._open: str | None = None  # its kind: text, thinking, tool_use
        self._calls: dict[int, int] = {}  # a chunk's tool call index -> block index
        self._stop: str | None = None
        self._usage: dict[str, Any] = {}

    def chunks(self, chunks: list[dict[str, Any]], raw: bytes | None) -> bytes:
        out = [] if self._started else [self._start(chunks)]
        self._started = True
        for chunk in chunks:
            if chunk.get("usage"):
                self._usage = chunk["usage"]
            for choice in chunk.get("choices") or ():
                if choice.get("index", 0) != 0:
                    continue
                out.extend(self._delta(choice.get("delta") or {}))
                if choice.get("finish_reason"):
                    self._stop = stop_reason(choice["finish_reason"])
        return b"".join(out)

    def relay(self, raw: bytes) -> bytes:
        return raw  # Anthropic's own events (their model name set as asked for)

    def end(self) -> list[bytes]:
        out = [self._close()]
        usage = messages_usage(self._usage)
        if not self._usage.get("prompt_tokens"):
            usage = {"output_tokens": usage["output_tokens"]}
        delta = {"stop_reason": self._stop or "end_turn", "stop_sequence": None}
        out.append(event("message_delta", {"delta": delta, "usage": usage}))
        out.append(event("message_stop", {}))
        return out

    def error(self, error: ErrorReply) -> bytes:
        return event("error", {"error": error_body(error)["error"]})

    def _start(self, chunks: list[dict[str, Any]]) -> bytes:
        message: dict[str, Any] = {
            "id": message_id(chunks[0].get("id") if chunks else None),
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self._input_tokens, "output_tokens": 0},
        }
        return event("message_start", {"message": message})

    def _delta(self, delta: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        for block in delta.get("thinking_blocks") or ():
            out.extend(self._thinking(block))
        if delta.get("content"):
            if self._open != "text":
                out.append(self._begin("text", {"type": "text", "text": ""}))
            text = {"type": "text_delta", "text": delta["content"]}
            out.append(event("content_block_delta", {"index": self._index, "delta": text}))
        for call in delta.get("tool_calls") or ():
            out.extend(self._tool_call(call))
        return out

    def _thinking(self, block: dict[str, Any]) -> list[bytes]:
        """LiteLLM's thinking deltas: text pieces, then one carrying the signature (and
        all the text again, which is not repeated here)."""
        out: list[bytes] = []
        if block.get("type") == "redacted_thinking":
            out.append(self._begin("redacted_thinking", dict(block)))
            out.append(self._close())
            return out
        if self._open != "thinking":
            out.append(self._begin("thinking", {"type": "thinking", "thinking": ""}))
        if block.get("signature"):
            delta = {"type": "signature_delta", "signature": block["signature"]}
            out.append(event("content_block_delta", {"index": self._index, "delta": delta}))
            out.append(self._close())
        elif block.get("thinking"):
            delta = {"type": "thinking_delta", "thinking": block["thinking"]}
            out.append(event("content_block_delta", {"index": self._index, "delta": delta}))
        return out

    def _tool_call(self, call: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        number = call.get("index", 0)
        function = call.get("function") or {}
        if number not in self._calls:
            use = {"type": "tool_use", "id": call.get("id") or "", "name": function.get("name")}
            out.append(self._begin("tool_use", use | {"input": {}}))
            self._calls[number] = self._index
        if function.get("arguments"):
            delta = {"type": "input_json_delta", "partial_json": function["arguments"]}
            out.append(event("content_block_delta", {"index": self._calls[number], "delta": delta}))
        return out

    def _begin(self, kind: str, block: dict[str, Any]) -> bytes:
        closing = self._close()
        self._index += 1
        self._open = kind
        return closing + event(
            "content_block_start", {"index": self._index, "content_block": block}
        )

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return event("content_block_stop", {"index": self._index})
