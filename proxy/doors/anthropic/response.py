"""The Messages API's reply and the chat completion, each as the other.

A completion becomes the message the client reads (its content blocks, stop reason and
usage in Anthropic's terms); an Anthropic deployment's own message becomes the
completion the engine stores, its blocks kept whole where the chat form cannot hold
them. An error becomes Anthropic's error body, of the type its status has.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from starlette.responses import Response

from proxy.conversation.identity import ANTHROPIC_CONTENT
from proxy.costs.usage import chat_usage, usage_of
from proxy.doors.base import ErrorReply, text_of, typed

__all__ = [
    "ERROR_STATUS",
    "anthropic_error",
    "arguments",
    "chat_completion",
    "content_blocks",
    "error_body",
    "finish_reason",
    "message_id",
    "messages_usage",
    "native_content",
    "stop_reason",
    "to_message",
    "tool_call",
    "usage_as_chat",
]

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
_FINISH = {"end_turn": "stop", "max_tokens": "length", "tool_use": "tool_calls"}

_CHAT_BLOCKS = {
    "text": frozenset({"type", "text", "cache_control"}),
    "tool_use": frozenset({"type", "id", "name", "input", "cache_control"}),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
}


# -- a completion as the client's message -------------------------------------------------


def to_message(completion: dict[str, Any], model: str) -> dict[str, Any]:
    """A chat completion as a Messages API message."""
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    return {
        "id": message_id(completion.get("id")),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(message),
        "stop_reason": stop_reason(choice.get("finish_reason")),
        "stop_sequence": None,
        "usage": messages_usage(completion.get("usage") or {}),
    }


def content_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat reply message as content blocks: its thinking, its text, its tool calls."""
    blocks: list[dict[str, Any]] = list(message.get("thinking_blocks") or ())
    content = text_of(message.get("content"))
    if content:
        blocks.append({"type": "text", "text": content})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id"),
                "name": function.get("name"),
                "input": arguments(function.get("arguments")),
            }
        )
    return blocks


def stop_reason(finish_reason: Any) -> str | None:
    """A chat finish reason as the Messages API's stop reason."""
    if finish_reason is None:
        return None
    return _STOP_REASONS.get(str(finish_reason), "end_turn")


def message_id(completion_id: Any) -> str:
    """A Messages API id for the upstream's completion id."""
    return "msg_" + (str(completion_id or "").removeprefix("chatcmpl-") or uuid.uuid4().hex)


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


def arguments(text: Any) -> Any:
    """A tool call's arguments as the object Anthropic's `input` is."""
    try:
        value = orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return {"arguments": text}
    return value if isinstance(value, dict) else {"arguments": value}


# -- a provider's message as a completion -------------------------------------------------


def chat_completion(reply: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic message as a chat completion (a ValueError for what is none: its
    `content` is not a list of typed blocks)."""
    if not typed(reply.get("content")):
        raise ValueError("a message without its content")
    message: dict[str, Any] = {"role": "assistant", "content": None}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    thinking: list[dict[str, Any]] = []
    for block in reply.get("content") or ():
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text") or "")
        elif kind in ("thinking", "redacted_thinking"):
            thinking.append(block)
        elif kind == "tool_use":
            calls.append(tool_call(block.get("id"), block.get("name"), block.get("input")))
    if texts:
        message["content"] = "".join(texts)
    if calls:
        message["tool_calls"] = calls
    if thinking:
        message["thinking_blocks"] = thinking
    message |= native_content(reply.get("content") or [])
    finish = finish_reason(reply.get("stop_reason"))
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return {"id": reply.get("id"), "choices": [choice], "usage": usage_as_chat(reply.get("usage"))}


def usage_as_chat(used: Any) -> dict[str, Any]:
    """Anthropic's usage in chat terms: every input token, cached or not, is a prompt
    token (Anthropic counts cache reads and writes apart from `input_tokens`); the reads
    and writes are kept beside it (`proxy.costs.usage.chat_usage`)."""
    return chat_usage(used if isinstance(used, dict) else None)


def finish_reason(stop_reason: Any) -> str:
    """A message's stop reason as a chat finish reason."""
    return _FINISH.get(str(stop_reason), "stop")


def native_content(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """`{ANTHROPIC_CONTENT: blocks}` where the chat form cannot hold every block (a server
    tool's call or result, a text's citations), else nothing."""
    for block in blocks:
        known = _CHAT_BLOCKS.get(block.get("type", ""))
        if known is None or any(v not in (None, []) for k, v in block.items() if k not in known):
            return {ANTHROPIC_CONTENT: blocks}
    return {}


def tool_call(call_id: Any, name: Any, given: Any) -> dict[str, Any]:
    """A `tool_use` block's id, name and input as a chat tool call."""
    text = orjson.dumps(given if given is not None else {}).decode()
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


# -- an error -------------------------------------------------------------------------------


def error_body(error: ErrorReply) -> dict[str, Any]:
    """Anthropic's error body: its error type for the HTTP status."""
    kind = _ERROR_TYPES.get(error.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}


def anthropic_error(error: ErrorReply) -> Response:
    """An error answered in Anthropic's shape."""
    return Response(
        orjson.dumps(error_body(error)),
        status_code=error.status,
        media_type="application/json",
        headers=error.headers,
    )
