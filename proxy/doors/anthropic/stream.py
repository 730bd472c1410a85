"""Anthropic's streaming event sequence, made from the upstream's chat chunks.

`message_start`, then for each content block `content_block_start`, its deltas and
`content_block_stop`, then `message_delta` (stop reason, usage) and `message_stop`.
A failure mid-stream is an `error` event and no `message_stop`.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from proxy.costs.usage import usage_of
from proxy.doors.base import ErrorReply

__all__ = ["ERROR_STATUS", "MessagesFramer", "error_body", "message_id", "stop_reason"]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}

# The status an error of each type is answered with (Anthropic's own table).
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def stop_reason(finish_reason: Any) -> str | None:
    if finish_reason is None:
        return None
    return _STOP_REASONS.get(str(finish_reason), "end_turn")


def error_body(error: ErrorReply) -> dict[str, Any]:
    """Anthropic's error body: its error type for the HTTP status."""
    kind = _ERROR_TYPES.get(error.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}


def message_id(completion_id: Any) -> str:
    """A Messages API id for the upstream's completion id."""
    return "msg_" + (str(completion_id or "").removeprefix("chatcmpl-") or uuid.uuid4().hex)


def event(kind: str, data: dict[str, Any]) -> bytes:
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


def messages_usage(usage: dict[str, Any]) -> dict[str, int]:
    """A chat usage in the Messages API's terms: `input_tokens` leaves out the tokens read
    from and written to the provider's prompt cache, which are counted beside it."""
    used = usage_of(usage)
    if used is None:
        return {"input_tokens": 0, "output_tokens": int(usage.get("completion_tokens") or 0)}
    return {
        "input_tokens": used.prompt - used.cache_read - used.cache_write,
        "cache_read_input_tokens": used.cache_read,
        "cache_creation_input_tokens": used.cache_write,
        "output_tokens": used.output,
    }
