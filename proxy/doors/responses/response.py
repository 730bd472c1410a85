"""The Responses API's reply and the chat completion, each as the other.

A completion becomes the response object the client reads (its output items, named by
`ItemNames`, and its usage in the API's terms); an OpenAI deployment's own response
becomes the completion the engine stores, its output items kept whole where the chat
form cannot hold them.
"""

from __future__ import annotations

import time
from typing import Any

from proxy.conversation.identity import RESPONSES_OUTPUT
from proxy.costs.usage import chat_usage
from proxy.doors.base import text_of, typed
from proxy.doors.responses.items import ItemNames

__all__ = [
    "ECHOED",
    "call_item",
    "chat_completion",
    "chat_item",
    "message_item",
    "output_items",
    "response_object",
    "response_usage",
    "tool_call",
    "usage_as_chat",
]

# Echoed in the response object, as OpenAI does.
ECHOED = (
    "instructions",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "max_output_tokens",
    "previous_response_id",
    "metadata",
    "parallel_tool_calls",
    "text",
    "reasoning",
    "user",
)


# -- a completion as the client's response ----------------------------------------------


def response_object(
    response_id: str,
    model: str,
    echo: dict[str, Any],
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    """The response object, the request's parameters echoed as OpenAI does (`ECHOED`)."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": output,
        "error": None,
        "incomplete_details": None,
        "usage": response_usage(usage) if usage else None,
        **echo,
        "tools": echo.get("tools") or [],
        "tool_choice": echo.get("tool_choice") or "auto",
        "parallel_tool_calls": echo.get("parallel_tool_calls") is not False,
        "metadata": echo.get("metadata") or {},
        "text": echo.get("text") or {"format": {"type": "text"}},
    }


def output_items(message: dict[str, Any], names: ItemNames) -> list[dict[str, Any]]:
    """A chat reply message as output items: its text, then its function calls."""
    items: list[dict[str, Any]] = []
    content = text_of(message.get("content"))
    if content:
        items.append(message_item(names.mint("message"), content, "completed"))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        items.append(
            call_item(
                names.mint("function_call"),
                call.get("id") or "",
                function.get("name") or "",
                function.get("arguments") or "",
                "completed",
            )
        )
    return items


def response_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """Chat usage in the Responses API's terms."""
    prompt = usage.get("prompt_tokens") or 0
    completion = usage.get("completion_tokens") or 0
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


def message_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    """A message output item of the reply's text (none yet: its content comes later)."""
    content = [] if text is None else [{"type": "output_text", "text": text, "annotations": []}]
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": content,
    }


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    """A function call output item."""
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


# -- a provider's response as a completion -----------------------------------------------


def chat_completion(reply: dict[str, Any]) -> dict[str, Any]:
    """A response as a chat completion (a ValueError for what is none: its
    `output` is not a list of typed items)."""
    output = reply.get("output")
    if not typed(output):
        raise ValueError("a response without its output")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in output:
        if item.get("type") == "message":
            texts += [_text(part) for part in item.get("content") or ()]
        elif item.get("type") == "function_call":
            calls.append(tool_call(item))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    if not all(map(chat_item, output)):
        message[RESPONSES_OUTPUT] = output
    finish = "tool_calls" if calls else "stop"
    if reply.get("status") == "incomplete":
        finish = "length"
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return {"id": reply.get("id"), "choices": [choice], "usage": usage_as_chat(reply.get("usage"))}


def chat_item(item: dict[str, Any]) -> bool:
    """Whether the chat form holds `item` whole: a function call, or a message of plain
    text (no annotations, such as a web search's citations)."""
    kind = item.get("type", "message")
    if kind == "message":
        parts = item.get("content")
        return isinstance(parts, str) or not any(p.get("annotations") for p in parts or ())
    return kind == "function_call"


def usage_as_chat(used: Any) -> dict[str, Any]:
    """A response's usage in chat terms (LiteLLM may hand over either), its cached
    tokens kept (`proxy.costs.usage.chat_usage`)."""
    return chat_usage(used if isinstance(used, dict) else None)


def _text(part: Any) -> str:
    if not isinstance(part, dict):
        return ""
    return str(part.get("text") or part.get("refusal") or "")


def tool_call(item: dict[str, Any]) -> dict[str, Any]:
    """A `function_call` item as a chat tool call."""
    function = {"name": item.get("name"), "arguments": item.get("arguments") or ""}
    return {"id": item.get("call_id"), "type": "function", "function": function}
