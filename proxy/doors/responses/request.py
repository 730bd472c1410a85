"""A Responses API request as a chat-completions body, the one conversation model.

`instructions` become the system message; `input` items become chat messages (a
`function_call` joins the assistant message before it, as one turn's output does;
a `function_call_output` is a tool message; an `item_reference` is the output item it
names, read from the session's stored reply before the translation:
`proxy.doors.responses.items`).

Fields the door does not carry (Codex's `client_metadata`, say) and tools other than
functions (`web_search`, `namespace`, …) are dropped and said, never refused;
`reasoning.effort` becomes the provider's reasoning setting where it has one.
"""

from __future__ import annotations

from typing import Any

from proxy.conversation.identity import RESPONSES_OUTPUT
from proxy.conversation.validation import check_function, check_ranges, check_types, invalid
from proxy.doors.base import text_of, unknown_fields
from proxy.doors.responses.response import chat_item
from proxy.doors.translations import Translations, Written, conversation_key
from proxy.upstream.client import PROVIDER_HINTS

__all__ = ["CARRIED", "OPTIONAL", "conversation_of", "native_dropped", "to_chat"]

# Parameters the chat translation sends under their own name (with `text.verbosity` as
# `verbosity`).
_SAME_IN_CHAT = (
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "user",
    "metadata",
    "moderation",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "safety_identifier",
    "service_tier",
    "store",
)

# The Responses API's parameters this door serves on either route (`previous_response_id`
# and `conversation` are served by the proxy itself).
_PARAMETERS = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "temperature",
        "top_p",
        "max_output_tokens",
        "stream",
        "previous_response_id",
        "conversation",
        "text",
        "reasoning",
        "user",
        *_SAME_IN_CHAT,
    }
)
# Those only the Responses API itself carries (`native`): dropped and said on
# the chat translation.
_NATIVE = frozenset(
    {
        "background",
        "context_management",
        "include",
        "max_tool_calls",
        "prompt",
        "stream_options",
        "top_logprobs",
        "truncation",
    }
)
# Chat parameters this door may produce that not every provider takes.
OPTIONAL = (
    ("reasoning_effort",),
    ("response_format",),
    ("service_tier",),
    ("store",),
    *((name,) for name in PROVIDER_HINTS),
)

# Fields LiteLLM's Responses route takes no argument for (Codex's `client_metadata`,
# `moderation`): carried in the body as they are.
CARRIED = ("client_metadata", "moderation")


# Every Responses API field's kind, as OpenAI's API reference gives it.
_KINDS = {
    "model": "string",
    "input": "string or array",
    "instructions": "string",
    **dict.fromkeys(("stream", "store", "background", "parallel_tool_calls"), "boolean"),
    **dict.fromkeys(("temperature", "top_p"), "number"),
    **dict.fromkeys(("max_output_tokens", "max_tool_calls", "top_logprobs"), "integer"),
    **dict.fromkeys(("tools", "include", "context_management"), "array"),
    **dict.fromkeys(
        (
            "metadata",
            "text",
            "reasoning",
            "moderation",
            "prompt",
            "prompt_cache_options",
            "stream_options",
        ),
        "object",
    ),
    **dict.fromkeys(
        (
            "user",
            "previous_response_id",
            "prompt_cache_key",
            "prompt_cache_retention",
            "safety_identifier",
            "service_tier",
            "truncation",
        ),
        "string",
    ),
    "tool_choice": "string or object",
    "conversation": "string or object",
}


def to_chat(
    body: dict[str, Any],
    translations: Translations | None = None,
    tenant: str = "",
    written: Written | None = None,
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A Responses request as a chat-completions body and what it could not carry, or a
    400 naming the field. With `translations`, a conversation's items translated for an
    earlier request are not translated again."""
    dropped = unknown_fields(body, _PARAMETERS)
    if body.get("background") is True:
        raise invalid("background", "Background responses are not served by this proxy.")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise invalid("model", "`model` is required and must be a non-empty string.")
    check_types(body, _KINDS)
    check_ranges(body, {"temperature": (0, 2), "top_p": (0, 1), "max_output_tokens": (1, None)})
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise invalid("instructions", "`instructions` must be a string.")
        messages.append({"role": "system", "content": instructions})
    source = body.get("input")
    if isinstance(source, str):
        messages.append({"role": "user", "content": source})
    elif isinstance(source, list) and source and translations is not None:
        key = conversation_key(tenant, source[0])
        messages += translations.chat(key, source, _translated, written)
    elif isinstance(source, list) and source:
        _translated(source, 0, messages)
    else:
        raise invalid("input", "`input` is required: a string or a non-empty array of items.")
    conversation = messages[1:] if instructions is not None else messages
    if not any(m.get("content") is not None or m.get("tool_calls") for m in conversation):
        raise invalid("input", "`input` holds no message.")
    out: dict[str, Any] = {"model": model, "messages": messages}
    for name in _SAME_IN_CHAT:
        if body.get(name) is not None:
            out[name] = body[name]
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = body["max_output_tokens"]
    tools = []
    for number, tool in enumerate(body.get("tools") or ()):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if isinstance(kind, str) and kind != "function":
            dropped.append(f"tools.{tool.get('name') or kind}")  # a hosted or namespace tool
        else:
            tools.append(_tool(tool, f"tools[{number}]"))
    if tools:
        out["tools"] = tools
    if body.get("tool_choice") is not None:
        choice = _tool_choice(body["tool_choice"])
        if tools:  # a choice among hosted tools only: none left
            out["tool_choice"] = choice
    if isinstance(body.get("reasoning"), dict) and body["reasoning"].get("effort"):
        out["reasoning_effort"] = body["reasoning"]["effort"]
    text = body.get("text")
    if isinstance(text, dict):
        form = text.get("format")
        if form is not None and not isinstance(form, dict):
            raise invalid("text.format", "`text.format` must be an object.")
        if isinstance(form, dict) and not isinstance(form.get("type"), str):
            raise invalid("text.format.type", "`text.format.type` must be a string.")
    if isinstance(text, dict) and isinstance(text.get("format"), dict):
        out |= _format(text["format"])
    if isinstance(text, dict) and text.get("verbosity") is not None:
        out["verbosity"] = text["verbosity"]
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out, tuple(dropped)


def _translated(source: list[Any], start: int, chat: list[dict[str, Any]]) -> tuple[int, int]:
    """source[start:] onto the end of `chat`; a longer conversation's translation may go
    on after its last user message or tool output, where no model turn is open."""
    items = _Items(chat)
    resume = start, len(chat)
    for index in range(start, len(source)):
        item = source[index]
        items.add(item, f"input[{index}]")
        if item.get("type", "message") == "function_call_output" or (
            item.get("type", "message") == "message" and item.get("role") != "assistant"
        ):
            resume = index + 1, len(chat)
    items.close()
    return resume


def native_dropped(body: dict[str, Any]) -> tuple[str, ...]:
    """The body's fields the Responses API's own route does not carry (those carried in
    the body as they are aside: `CARRIED`)."""
    own = unknown_fields(body, _PARAMETERS | _NATIVE)
    return tuple(key for key in own if key not in CARRIED)


def conversation_of(tenant: str, body: dict[str, Any]) -> bytes | None:
    """The key of the conversation the body's input items begin, if it has any."""
    source = body.get("input")
    return conversation_key(tenant, source[0]) if isinstance(source, list) and source else None


class _Items:
    """Input items as chat messages. A model's turn (its reasoning, text and calls, and
    items of other kinds, such as a hosted tool's call) is one assistant message; where
    the chat form cannot hold all its items, they are kept as they came, in
    `responses_output`, for a provider that speaks the Responses API."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self._messages = messages
        self._turn: list[dict[str, Any]] = []  # the open assistant turn's items
        self._pending: list[dict[str, Any]] = []  # its items before its message or call

    def add(self, item: Any, where: str) -> None:
        if not isinstance(item, dict):
            raise invalid(where, f"`{where}` must be an object.")
        kind = item.get("type", "message")
        if not isinstance(kind, str):
            raise invalid(f"{where}.type", f"`{where}.type` must be a string.")
        if kind == "message" and item.get("role") == "assistant":
            self._assistant(_message(item, where), item)
        elif kind == "message":
            self.close()
            self._messages.append(_message(item, where))
        elif kind == "function_call":
            call = _function_call(item, where)
            last = self._messages[-1] if self._messages else None
            if self._turn and last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)  # the same turn's output
                self._turn += [*self._pending, item]
                self._pending = []
            else:
                self._assistant({"role": "assistant", "content": None, "tool_calls": [call]}, item)
        elif kind == "function_call_output":
            self.close()
            self._messages.append(_function_output(item, where))
        elif kind in _TURN_ITEMS:  # reasoning, a hosted tool's call, …: the model's turn
            self._pending.append(item)
        else:  # an `item_reference` is resolved before (`References`)
            raise invalid(f"{where}.type", f"`{where}`: items of type `{kind}` are not supported.")

    def close(self) -> None:
        """The open turn is over: it keeps its items, if the chat form lacks any."""
        if self._pending:  # a turn of items the chat form has no message for
            self._assistant({"role": "assistant", "content": None}, None)
        if self._turn and not all(map(chat_item, self._turn)):
            self._messages[-1][RESPONSES_OUTPUT] = self._turn
        self._turn = []

    def _assistant(self, message: dict[str, Any], item: dict[str, Any] | None) -> None:
        pending = self._pending
        self._pending = []
        self.close()
        self._messages.append(message)
        self._turn = [*pending, *([item] if item is not None else [])]


# Items of a model's turn (and their results) the chat form has no message for.
_TURN_ITEMS = frozenset(
    {
        "reasoning",
        "web_search_call",
        "file_search_call",
        "computer_call",
        "computer_call_output",
        "code_interpreter_call",
        "image_generation_call",
        "local_shell_call",
        "local_shell_call_output",
        "mcp_list_tools",
        "mcp_call",
        "mcp_approval_request",
        "mcp_approval_response",
        "custom_tool_call",
        "custom_tool_call_output",
    }
)


def _function_output(item: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(item.get("call_id"), str):
        raise invalid(f"{where}.call_id", f"`{where}.call_id` must be a string.")
    output = item.get("output")
    if isinstance(output, list):
        output = text_of(output)
    if not isinstance(output, str):
        raise invalid(f"{where}.output", f"`{where}.output` must be a string.")
    return {"role": "tool", "tool_call_id": item["call_id"], "content": output}


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise invalid(
            f"{where}.role", f"`{where}.role` must be user, assistant, system or developer."
        )
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise invalid(f"{where}.content", f"`{where}.content` must be a string or an array.")
    parts = []
    for number, part in enumerate(content):
        here = f"{where}.content[{number}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append({"type": "text", "text": part["refusal"]})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            image = {"url": part["image_url"]}
            if part.get("detail"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise invalid(here, f"`{here}`: a part of type `{kind}` is not supported.")
    return {"role": role, "content": parts}


def _function_call(item: dict[str, Any], where: str) -> dict[str, Any]:
    for field in ("call_id", "name"):
        if not isinstance(item.get(field), str):
            raise invalid(f"{where}.{field}", f"`{where}.{field}`: a function_call needs a string.")
    arguments = item.get("arguments", "")
    if not isinstance(arguments, str):
        raise invalid(f"{where}.arguments", f"`{where}.arguments` must be a string.")
    function = {"name": item["name"], "arguments": arguments}
    return {"id": item["call_id"], "type": "function", "function": function}


def _tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise invalid(where, f"`{where}`: a tool needs a `type` (`function` and its `name`).")
    if not isinstance(tool.get("name"), str):
        raise invalid(f"{where}.name", f"`{where}.name` must be a string.")
    check_function(tool, where)
    function = {"name": tool["name"]}
    for key in ("description", "parameters", "strict"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if (
        isinstance(choice, dict)
        and choice.get("type") == "function"
        and isinstance(choice.get("name"), str)
    ):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise invalid("tool_choice", "`tool_choice`: auto, none, required or a function by name.")


def _format(form: dict[str, Any]) -> dict[str, Any]:
    kind = form.get("type")
    if kind == "json_schema":
        schema = {
            key: form[key] for key in ("name", "schema", "strict", "description") if key in form
        }
        return {"response_format": {"type": "json_schema", "json_schema": schema}}
    if kind == "json_object":
        return {"response_format": {"type": "json_object"}}
    return {}
