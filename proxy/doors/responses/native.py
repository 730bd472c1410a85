"""The Responses door's own API to an OpenAI deployment (`proxy.upstream.native`).

The planned chat window goes back into input items, the inverse of
`responses.to_chat`: the client's `instructions` stay instructions, other system and
developer messages (the proxy's summary and memory among them) are messages of their
role, a model's turn is its items as they came (`responses_output`: reasoning with its
encrypted content, hosted tool calls) or else its text and function calls, a tool
message a `function_call_output`. Hosted and namespace tools, `reasoning`, `include`,
`store` and Codex's `client_metadata` go as the client sent them, `prompt_cache_key` as
the engine made it its tenant's (`proxy.engine.planner.caching`);
`previous_response_id` never does: the proxy serves it, and sends the whole window.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable
from typing import Any

import orjson

from proxy.conversation.identity import RESPONSES_OUTPUT
from proxy.costs.usage import chat_usage
from proxy.doors.base import UNTYPED_EVENT, text_of, typed
from proxy.doors.responses.items import as_given
from proxy.doors.translations import Rendered, Rendering, Renderings, joined
from proxy.errors import UpstreamFailure
from proxy.upstream.failures import said_in
from proxy.upstream.native import NativeApi, lean_covers

__all__ = ["CARRIED", "ResponsesNative", "chat_item"]

# The Responses API's own parameters that go as the client sent them.
_FORWARDED = (
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "top_logprobs",
    "reasoning",
    "text",
    "include",
    "store",
    "metadata",
    "user",
    "prompt",
    "prompt_cache_options",
    "prompt_cache_retention",
    "safety_identifier",
    "service_tier",
    "truncation",
    "context_management",
    "max_tool_calls",
    "background",
    "stream_options",
)
# Fields LiteLLM's Responses route takes no argument for (Codex's `client_metadata`,
# `moderation`): carried in the body as they are.
CARRIED = ("client_metadata", "moderation")


class ResponsesNative:
    api: NativeApi = "responses"
    optional: tuple[tuple[str, str], ...] = (("reasoning", "reasoning_effort"),)

    def __init__(
        self,
        body: dict[str, Any],
        renderings: Renderings | None = None,
        conversation: Hashable = None,
    ) -> None:
        self._body = body
        self._renderings = renderings or Renderings()
        self._conversation = conversation  # its key, for a request of no session
        self.serialized: tuple[bytes, bool] | None = None

    def drop(self, name: str) -> bool:
        return self._body.pop(name, None) is not None

    def request(
        self, chat: dict[str, Any], summarized: bool, mid_system: bool, session: Hashable = None
    ) -> dict[str, Any]:
        """The window as a Responses call (OpenAI caches prompt prefixes by itself: a
        summary needs no mark; the session's `prompt_cache_key` keeps its turns together)."""
        messages = chat["messages"]
        out: dict[str, Any] = {"model": chat["model"]}
        instructions = self._body.get("instructions")
        first = messages[0] if messages else {}
        if instructions is not None and first == {"role": "system", "content": instructions}:
            out["instructions"] = instructions
            messages = messages[1:]
        key = session if session is not None else self._conversation
        rendered = _rendered(messages, self._renderings.taken(key))
        self._renderings.kept(key, rendered)
        window = joined(rendered.turns)
        self.serialized = window, not any(map(_REPAIRED, rendered.turns))
        out["input"] = orjson.Fragment(window)  # the JSON it is already, serialized as it is
        out |= {name: self._body[name] for name in _FORWARDED if self._body.get(name) is not None}
        if chat.get("max_tokens") is not None:
            out["max_output_tokens"] = chat["max_tokens"]
        if chat.get("prompt_cache_key"):  # the session's, or the client's made its tenant's
            out["prompt_cache_key"] = chat["prompt_cache_key"]
        carried = {name: self._body[name] for name in CARRIED if name in self._body}
        if carried:
            out["extra_body"] = carried
        return out

    def completion(self, reply: dict[str, Any]) -> dict[str, Any]:
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
                calls.append(_call(item))
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
        if calls:
            message["tool_calls"] = calls
        if not all(map(chat_item, output)):
            message[RESPONSES_OUTPUT] = output
        finish = "tool_calls" if calls else "stop"
        if reply.get("status") == "incomplete":
            finish = "length"
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return {"id": reply.get("id"), "choices": [choice], "usage": usage(reply.get("usage"))}

    def stream(self) -> ResponsesEvents:
        return ResponsesEvents(self)


class ResponsesEvents:
    """OpenAI's Responses stream read as chat chunks: text deltas, function calls by their
    order; the finish, with the whole turn, only on the response's own completion."""

    def __init__(self, native: ResponsesNative) -> None:
        self._native = native
        self._calls = 0

    def event(self, kind: str, data: dict[str, Any], raw: bytes) -> tuple[bytes, list[dict]]:
        delta: dict[str, Any] = {}
        if not kind:  # every event of the API names its type: this one is no part of it
            raise UpstreamFailure(UNTYPED_EVENT)
        if kind in ("error", "response.failed"):
            said = said_in(data.get("response")) or said_in(data)
            raise UpstreamFailure(said or "The provider's response failed.")
        if kind == "response.output_text.delta":
            delta = {"content": data.get("delta") or ""}
        elif kind == "response.output_item.added":
            item = data.get("item") or {}
            if item.get("type") == "function_call":
                call = _call(item | {"arguments": ""}) | {"index": self._calls}
                delta = {"tool_calls": [call]}
                self._calls += 1
        elif kind == "response.function_call_arguments.delta":
            arguments = {"arguments": data.get("delta") or ""}
            delta = {"tool_calls": [{"index": self._calls - 1, "function": arguments}]}
        elif kind in ("response.completed", "response.incomplete"):
            whole = self._native.completion(data.get("response") or {})
            choice = whole["choices"][0]
            kept = choice["message"].get(RESPONSES_OUTPUT)
            end = {"message_fields": {RESPONSES_OUTPUT: kept}} if kept else {}
            finish = {"index": 0, "delta": end, "finish_reason": choice["finish_reason"]}
            return raw, [{"choices": [], "usage": whole["usage"]}, {"choices": [finish]}]
        if not delta:
            return raw, []
        return raw, [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}]


def chat_item(item: dict[str, Any]) -> bool:
    """Whether the chat form holds `item` whole: a function call, or a message of plain
    text (no annotations, such as a web search's citations)."""
    kind = item.get("type", "message")
    if kind == "message":
        parts = item.get("content")
        return isinstance(parts, str) or not any(p.get("annotations") for p in parts or ())
    return kind == "function_call"


def usage(used: Any) -> dict[str, Any]:
    """A response's usage in chat terms (LiteLLM may hand over either), its cached
    tokens kept (`proxy.costs.usage.chat_usage`)."""
    return chat_usage(used if isinstance(used, dict) else None)


def _text(part: Any) -> str:
    if not isinstance(part, dict):
        return ""
    return str(part.get("text") or part.get("refusal") or "")


def _call(item: dict[str, Any]) -> dict[str, Any]:
    function = {"name": item.get("name"), "arguments": item.get("arguments") or ""}
    return {"id": item.get("call_id"), "type": "function", "function": function}


# -- the window as input items ----------------------------------------------------------

_REPAIRED = operator.attrgetter("repaired")


def _rendered(messages: list[dict[str, Any]], previous: Rendered | None) -> Rendered:
    """The window's messages as input items, each message's on its own: those of the
    previous rendering where the window keeps its messages (`Rendered.reused`), else
    made here (a message that makes no item makes no turn)."""
    turns: list[Rendering] = []
    read: list[int] = []
    known: dict[int, Rendering] = {}
    start = 0
    if previous is not None:
        kept, start = previous.reused(messages)
        turns, read = previous.turns[:kept], previous.read[:kept]
        known = {id(turn.sources[0]): turn for turn in previous.turns[kept:]}
    for at, message in enumerate(messages[start:], start + 1):
        rendering = known.get(id(message))
        if rendering is None or not rendering.of((message,), "item"):
            items = _items(message)
            if not items:
                continue
            data = orjson.dumps(items)[1:-1]  # the items, to join with the window's others (a copy)
            repaired = not lean_covers("responses", data)
            rendering = Rendering((message,), "item", data, repaired)
        turns.append(rendering)
        read.append(at)
    return Rendered(messages, turns, read)


def _items(message: dict[str, Any]) -> list[dict[str, Any]]:
    role = message.get("role")
    content = message.get("content")
    if role == "tool":
        output = content if isinstance(content, str) else text_of(content)
        call_id = message.get("tool_call_id")
        return [{"type": "function_call_output", "call_id": call_id, "output": output}]
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


def _parts(content: Any) -> list[dict[str, Any]]:
    """A user message's chat parts as input parts (the inverse of `responses._message`)."""
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
