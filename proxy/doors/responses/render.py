"""The planned chat window as Responses input items, the inverse of the request's
translation (`proxy.doors.responses.request`): other system and developer messages than
the client's `instructions` (the proxy's summary and memory among them) are messages of
their role, a model's turn is its items as they came (`responses_output`: reasoning with
its encrypted content, hosted tool calls) or else its text and function calls, a tool
message a `function_call_output`.

Each message is rendered on its own, as JSON, and kept (`proxy.doors.translations`):
the next request of the conversation renders only the messages it does not share with it.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.conversation.identity import RESPONSES_OUTPUT
from proxy.doors.base import text_of
from proxy.doors.responses.items import as_given
from proxy.doors.translations import Redrawn, Rendered

__all__ = ["plainly", "rendered_items"]


def rendered_items(
    messages: list[dict[str, Any]], previous: Rendered | None, plain: bool = False
) -> Rendered:
    """The window's messages as input items, each message's on its own: those of the
    previous rendering where the window keeps its messages (`Redrawn`), else
    made here (a message that makes no item makes no turn). `plain`: the client writes
    its messages as the SDKs do (`plainly`), and a text message goes back that way."""
    kind = "plain" if plain else "item"
    drawn = Redrawn("responses", messages, previous)
    for at, message in enumerate(messages[drawn.start :], drawn.start + 1):
        if not drawn.taken((message,), kind, at):
            items = _items(message, plain)
            if items:  # the items, to join with the window's others (a copy)
                drawn.made((message,), kind, orjson.dumps(items)[1:-1], at)
    return drawn.rendered()


def plainly(given: Any) -> bool:
    """Whether a request's `input` writes its messages as the SDKs do: a string, or
    messages with a role and no `type` (Codex types every item, and its text as parts)."""
    if isinstance(given, str):
        return True
    last = next((i for i in reversed(given or ()) if isinstance(i, dict) and "role" in i), None)
    return last is not None and "type" not in last


def _items(message: dict[str, Any], plain: bool) -> list[dict[str, Any]]:
    role = message.get("role")
    content = message.get("content")
    if role == "tool":
        output = content if isinstance(content, str) else text_of(content)
        call_id = message.get("tool_call_id")
        return [{"type": "function_call_output", "call_id": call_id, "output": output}]
    if plain and isinstance(content, str) and content and not _turn_of_items(message):
        # As such a client wrote it, the API's plainest message; for a model's text, the
        # same prompt as its `output_text` part, 14% fewer bytes to read.
        return [{"role": role, "content": content}]
    if role == "user" and isinstance(content, list):
        return [{"type": "message", "role": "user", "content": _parts(content)}]
    if role != "assistant":
        text = content if isinstance(content, str) else text_of(content)
        return [{"type": "message", "role": role, "content": text}]
    if message.get(RESPONSES_OUTPUT):
        return [as_given(item) for item in message[RESPONSES_OUTPUT]]
    items: list[dict[str, Any]] = []
    text = text_of(content)
    if text:
        part = {"type": "output_text", "text": text, "annotations": []}
        items.append({"type": "message", "role": "assistant", "content": [part]})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        items.append(
            {
                "type": "function_call",
                "call_id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments") or "",
            }
        )
    return items


def _turn_of_items(message: dict[str, Any]) -> bool:
    """A model's turn that calls tools or came with items the chat form lacks."""
    return bool(message.get("tool_calls") or message.get(RESPONSES_OUTPUT))


def _parts(content: Any) -> list[dict[str, Any]]:
    """A user message's chat parts as input parts (the inverse of the request's
    translation of a message)."""
    parts = []
    for part in content or ():
        if part.get("type") == "text":
            parts.append({"type": "input_text", "text": part.get("text") or ""})
        elif part.get("type") == "image_url":
            image = part.get("image_url") or {}
            parts.append({"type": "input_image", "image_url": image.get("url")} | _detail(image))
    return parts


def _detail(image: dict[str, Any]) -> dict[str, Any]:
    return {"detail": image["detail"]} if image.get("detail") else {}
