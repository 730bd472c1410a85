"""A Messages API request as a chat-completions body, the one conversation model.

A request becomes chat messages the way LiteLLM turns chat back into Messages for an
Anthropic deployment, so nothing is lost on the way through: `system` blocks become
one system message (its parts keep their `cache_control`), `tool_use` blocks become
tool calls, each `tool_result` its own tool message right after the call it answers,
and `thinking`/`redacted_thinking` blocks ride along as the message's
`thinking_blocks`, byte for byte with their signatures. The engine puts its summary
after the client's own system message, so the client's cache breakpoints keep their
place.

Agents send more than the published API (Claude Code: `context_management`,
`output_config`, a `system` message mid-conversation). What maps onto a chat parameter
is translated (`output_config.effort` and `thinking` to the provider's reasoning
setting, `output_config.format` to `response_format`, `context_management` for a
provider that takes it); what does not, and server tools, are dropped and said.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.conversation.validation import (
    check_function,
    check_ranges,
    check_strings,
    check_types,
    invalid,
)
from proxy.doors.anthropic.response import native_content
from proxy.doors.base import unknown_fields
from proxy.doors.translations import Translations, Written, conversation_key

__all__ = ["OPTIONAL", "native_dropped", "to_chat"]

# The Messages API's parameters this door serves on either route.
_PARAMETERS = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
    }
)
# Those only the Messages API itself carries (`native`): dropped and said on the
# chat translation (`metadata` names the session either way). What LiteLLM's Messages
# route does not carry (`service_tier`, `diagnostics`, …) is dropped and said on both.
_NATIVE = frozenset({"metadata", "container", "inference_geo"})
_ROLES = ("user", "assistant", "system")
# Chat parameters this door may produce that not every provider takes: the client's
# own thinking budget, where a model takes it, else its effort level.
OPTIONAL = (
    ("top_k",),
    ("thinking", "reasoning_effort"),
    ("response_format",),
    ("context_management",),
    ("cache_control",),
    ("speed",),
)
# Fields carried as they are, to a provider that takes them (LiteLLM maps each to Claude).
_CARRIED = ("context_management", "cache_control", "speed")
# `thinking.budget_tokens` as an effort, for a provider whose reasoning is a level.
_EFFORTS = ((2048, "low"), (16384, "medium"))


# Every Messages API field's kind, as Anthropic's API reference gives it.
_KINDS = {
    "model": "string",
    "max_tokens": "integer",
    "messages": "array",
    "system": "string or array",
    "stream": "boolean",
    "temperature": "number",
    "top_p": "number",
    "top_k": "integer",
    "stop_sequences": "array",
    "tools": "array",
    **dict.fromkeys(
        (
            "metadata",
            "thinking",
            "tool_choice",
            "output_config",
            "cache_control",
            "context_management",
            "diagnostics",
        ),
        "object",
    ),
    **dict.fromkeys(("inference_geo", "service_tier", "speed"), "string"),
    "container": "string or object",
}


def to_chat(
    body: dict[str, Any],
    translations: Translations | None = None,
    tenant: str = "",
    written: Written | None = None,
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A Messages request as a chat-completions body and what it could not carry, or a
    400 naming the field. With `translations`, a conversation's messages translated for
    an earlier request are not translated again."""
    dropped = [key for key in unknown_fields(body, _PARAMETERS) if key not in _CARRIED]
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise invalid("model", "model: Field required (a non-empty string).")
    check_types(body, _KINDS, anthropic=True)
    check_ranges(body, {"temperature": (0, 1), "top_p": (0, 1), "top_k": (0, None)})
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise invalid("max_tokens", "max_tokens: Field required (a positive integer).")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "messages: Field required (a non-empty array).")
    chat: list[dict[str, Any]] = []
    if body.get("system"):
        chat.append(_system(body["system"]))
    if translations is None:
        _translated(messages, 0, chat)
    else:
        key = conversation_key(tenant, messages[0])
        chat += translations.chat(key, messages, _translated, written)
    if all(message["role"] == "system" for message in chat):
        raise invalid("messages", "messages: at least one user or assistant message.")
    out: dict[str, Any] = {"model": model, "messages": chat, "max_tokens": max_tokens}
    for name in ("temperature", "top_p", "top_k", *_CARRIED):
        if body.get(name) is not None:
            out[name] = body[name]
    out |= _reasoning(body.get("thinking"), body.get("output_config") or {}, dropped)
    if body.get("stop_sequences"):
        check_strings(body["stop_sequences"], "stop_sequences")
        out["stop"] = body["stop_sequences"]
    tools = []
    for number, tool in enumerate(body.get("tools") or ()):
        if isinstance(tool, dict) and tool.get("type") is not None:
            check_types(tool, {"type": "string"}, anthropic=True, where=f"tools.{number}")
        if isinstance(tool, dict) and "input_schema" not in tool and tool.get("type"):
            dropped.append(f"tools.{tool.get('name') or tool['type']}")  # a server tool
        else:
            tools.append(_tool(tool, f"tools.{number}"))
    if tools:
        out["tools"] = tools
    if body.get("tool_choice") is not None:
        choice = _tool_choice(body["tool_choice"])
        out |= choice if tools else {}  # a choice among server tools only: none left
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out, tuple(dropped)


def native_dropped(body: dict[str, Any]) -> tuple[str, ...]:
    """The body's fields the Messages API's own route does not carry (those a provider
    may take as they are aside)."""
    known = _PARAMETERS | _NATIVE
    return tuple(key for key in unknown_fields(body, known) if key not in _CARRIED)


def _translated(messages: list[Any], start: int, chat: list[dict[str, Any]]) -> tuple[int, int]:
    """messages[start:] onto the end of `chat`; each message is translated on its own,
    so a longer conversation's translation may go on from the end."""
    for index in range(start, len(messages)):
        chat.extend(_message(messages[index], f"messages.{index}"))
    return len(messages), len(chat)


def _reasoning(thinking: Any, config: dict[str, Any], dropped: list[str]) -> dict[str, Any]:
    """`thinking` and `output_config` as chat parameters: `thinking` as it is (for
    Anthropic), the effort as `reasoning_effort` (for every provider that has one), the
    output format as `response_format`."""
    out: dict[str, Any] = {}
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind == "enabled":
        out["thinking"] = thinking
        budget = thinking.get("budget_tokens")
        if isinstance(budget, int) and not isinstance(budget, bool):
            out["reasoning_effort"] = next((e for n, e in _EFFORTS if budget < n), "high")
    elif kind is not None and kind != "disabled":
        dropped.append(f"thinking.{kind}")  # e.g. `adaptive`: the effort says how much
    effort = config.get("effort")
    if isinstance(effort, str) and kind != "disabled":
        out["reasoning_effort"] = effort
    form = config.get("format")
    if isinstance(form, dict) and form.get("type") == "json_schema":
        schema = {"name": "output", "schema": form.get("schema") or {}}
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
    dropped.extend(f"output_config.{key}" for key in config if key not in ("effort", "format"))
    return out


def _system(system: Any) -> dict[str, Any]:
    if isinstance(system, str):
        return {"role": "system", "content": system}
    if not isinstance(system, list):
        raise invalid("system", "system: a string or an array of text blocks.")
    parts = []
    for number, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise invalid(f"system.{number}", "system: only text blocks are accepted.")
        parts.append(_text(block, f"system.{number}"))
    return {"role": "system", "content": parts}


def _message(message: Any, where: str) -> list[dict[str, Any]]:
    """A message as chat messages. A `system` message mid-conversation (Claude Code
    sends them) is a system message where it stands."""
    if not isinstance(message, dict) or message.get("role") not in _ROLES:
        raise invalid(f"{where}.role", f"{where}.role: `user`, `assistant` or `system`.")
    content = message.get("content")
    if message["role"] == "system":
        return [_system(content)] if content else []
    if isinstance(content, str):
        return [{"role": message["role"], "content": content}]
    if not isinstance(content, list):
        raise invalid(f"{where}.content", f"{where}.content: a string or an array of blocks.")
    for number, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            here = f"{where}.content.{number}"
            raise invalid(here, f"{here}: an object with a string `type`.")
    if message["role"] == "assistant":
        return [_assistant(content, where)]
    return _user(content, where)


def _user(blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """Tool results first, each a tool message (as the calls they answer came just
    before), then the rest of the turn as one user message."""
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for number, block in enumerate(blocks):
        here = f"{where}.content.{number}"
        if block["type"] == "tool_result":
            results.append(_tool_result(block, here))
        else:
            parts.append(_part(block, here))
    if len(parts) == 1 and parts[0].keys() == {"type", "text"}:
        results.append({"role": "user", "content": parts[0]["text"]})  # the same, plainer
    elif parts:
        results.append({"role": "user", "content": parts})
    return results


def _assistant(blocks: list[dict[str, Any]], where: str) -> dict[str, Any]:
    """An assistant turn as one chat message. Blocks the chat form cannot hold (a server
    tool's call and result, a text's citations) keep the whole turn as it came, in
    `anthropic_content`, for a provider that speaks the Messages API."""
    message: dict[str, Any] = {"role": "assistant", "content": None}
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    thinking: list[dict[str, Any]] = []
    for number, block in enumerate(blocks):
        here = f"{where}.content.{number}"
        kind = block["type"]
        if kind in ("thinking", "redacted_thinking"):
            thinking.append(block)  # as it came: its signature is checked upstream
        elif kind == "tool_use":
            calls.append(_tool_use(block, here))
        elif kind == "text":
            parts.append(_text(block, here))
    if parts:
        message["content"] = parts
    if calls:
        message["tool_calls"] = calls
    if thinking:
        message["thinking_blocks"] = thinking
    return message | native_content(blocks)


def _text(block: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(block.get("text"), str):
        raise invalid(f"{where}.text", f"{where}.text: Field required (a string).")
    return _cached({"type": "text", "text": block["text"]}, block)


def _part(block: Any, where: str) -> dict[str, Any]:
    kind = block.get("type") if isinstance(block, dict) else None
    if not isinstance(kind, str):
        raise invalid(where, f"{where}: an object with a string `type`.")
    if kind == "text":
        return _text(block, where)
    if kind == "image":
        return _cached(
            {"type": "image_url", "image_url": {"url": _source_url(block, where)}}, block
        )
    if kind == "document":
        return _cached({"type": "file", "file": {"file_data": _source_url(block, where)}}, block)
    raise invalid(f"{where}.type", f"{where}: a user block of type `{kind}` is not supported here.")


def _source_url(block: dict[str, Any], where: str) -> str:
    source = block.get("source")
    source = source if isinstance(source, dict) else {}
    media, data, url = source.get("media_type"), source.get("data"), source.get("url")
    if source.get("type") == "base64" and isinstance(media, str) and isinstance(data, str):
        return f"data:{media};base64,{data}"
    if source.get("type") == "url" and isinstance(url, str):
        return url
    raise invalid(f"{where}.source", f"{where}.source: a base64 or url source.")


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(block.get("tool_use_id"), str):
        raise invalid(f"{where}.tool_use_id", f"{where}.tool_use_id: Field required.")
    content = block.get("content", "")
    if isinstance(content, list):
        content = [_part(part, f"{where}.content.{n}") for n, part in enumerate(content)]
    elif not isinstance(content, str):
        raise invalid(f"{where}.content", f"{where}.content: a string or an array of blocks.")
    message = {"role": "tool", "tool_call_id": block["tool_use_id"], "content": content}
    if block.get("is_error"):
        message["is_error"] = True
    return _cached(message, block)


def _tool_use(block: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
        raise invalid(where, f"{where}: a tool_use block needs a string `id` and `name`.")
    if block.get("input") is not None and not isinstance(block["input"], dict):
        raise invalid(f"{where}.input", f"{where}.input: an object.")
    arguments = orjson.dumps(block.get("input") or {}).decode()
    call = {
        "id": block["id"],
        "type": "function",
        "function": {"name": block["name"], "arguments": arguments},
    }
    return _cached(call, block)


def _tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise invalid(where, f"{where}: a tool needs a string `name`.")
    if "input_schema" not in tool:  # Anthropic's server tools (web search, …)
        raise invalid(where, f"{where}: only client tools (with `input_schema`) are supported.")
    check_function(tool, where, parameters="input_schema", required=True)
    function = {"name": tool["name"], "parameters": tool["input_schema"]}
    if tool.get("description"):
        function["description"] = tool["description"]
    return _cached({"type": "function", "function": function}, tool)


def _tool_choice(choice: Any) -> dict[str, Any]:
    kind = choice.get("type") if isinstance(choice, dict) else None
    out: dict[str, Any] = {}
    if kind == "auto":
        out["tool_choice"] = "auto"
    elif kind == "any":
        out["tool_choice"] = "required"
    elif kind == "none":
        out["tool_choice"] = "none"
    elif kind == "tool" and isinstance(choice.get("name"), str):
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise invalid("tool_choice", "tool_choice: auto, any, none, or tool with a name.")
    if choice.get("disable_parallel_tool_use"):
        out["parallel_tool_calls"] = False
    return out


def _cached(part: dict[str, Any], block: dict[str, Any]) -> dict[str, Any]:
    """`part` with the block's cache breakpoint, if it had one."""
    if block.get("cache_control") is not None:
        part["cache_control"] = block["cache_control"]
    return part
