"""Request validation: reject what no provider should see, with OpenAI-shaped 400s.

Parameters are checked once per request; messages only where they are new. A full-
resend client's earlier messages were checked when they arrived (and are recognised
byte for byte), so a long conversation is not re-validated on every turn.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any

from proxy.conversation.identity import shared_messages
from proxy.errors import InvalidRequest

__all__ = [
    "ROLES",
    "Validated",
    "check_function",
    "check_ranges",
    "check_strings",
    "check_types",
    "header_session_id",
    "invalid",
    "session_id",
    "validate_messages",
    "validate_parameters",
]

# Any text a client can send (unicode, spaces, `/`, `.`, JSON), up to 256 characters,
# but control characters, line separators and lone surrogates: those break a terminal's
# line or a header, or cannot be stored as UTF-8. The sessions API names any id by `?id=`.
_SESSION_ID = re.compile(r"[^\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]{1,256}")

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# What each parameter must be, when present (and not null): `check_types`.
_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    "boolean": ((bool,), "a boolean"),
    "number": ((int, float), "a number"),
    "integer": ((int,), "an integer"),
    "string": ((str,), "a string"),
    "array": ((list,), "an array"),
    "object": ((dict,), "an object"),
    "string or array": ((str, list), "a string or an array"),
    "string or object": ((str, dict), "a string or an object"),
}
# Every chat parameter's kind, as OpenAI's API reference gives it.
_CHAT_KINDS = {
    "model": "string",
    "messages": "array",
    **dict.fromkeys(("temperature", "top_p", "presence_penalty", "frequency_penalty"), "number"),
    **dict.fromkeys(
        ("n", "max_tokens", "max_completion_tokens", "seed", "top_logprobs"), "integer"
    ),
    **dict.fromkeys(("stream", "logprobs", "parallel_tool_calls", "store"), "boolean"),
    **dict.fromkeys(("tools", "functions", "modalities"), "array"),
    **dict.fromkeys(
        (
            "audio",
            "logit_bias",
            "metadata",
            "moderation",
            "prediction",
            "prompt_cache_options",
            "response_format",
            "stream_options",
            "web_search_options",
        ),
        "object",
    ),
    **dict.fromkeys(
        (
            "prompt_cache_key",
            "prompt_cache_retention",
            "reasoning_effort",
            "safety_identifier",
            "service_tier",
            "user",
            "verbosity",
        ),
        "string",
    ),
    "stop": "string or array",
    "tool_choice": "string or object",
    "function_call": "string or object",
}

# Standard OpenAI chat-completion parameters (every one the pinned openai SDK sends:
# tests/integration/test_sdk_parameters.py): only these reach a provider. Anything else
# (api_base, api_key, custom_llm_provider, fallbacks, mock_response, …) could redirect
# traffic or change routing, so it is rejected, as OpenAI rejects unknown arguments.
CHAT_PARAMETERS = frozenset(
    {
        "model",
        "messages",
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "metadata",
        "modalities",
        "moderation",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning_effort",
        "response_format",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    }
)


# The documented range of each numeric parameter (inclusive; None: unbounded): a value
# outside it is a 400 here, before any provider is paid to refuse it.
Range = tuple[float | None, float | None]
_CHAT_RANGES: dict[str, Range] = {
    "temperature": (0, 2),
    "top_p": (0, 1),
    "presence_penalty": (-2, 2),
    "frequency_penalty": (-2, 2),
    "n": (1, 128),
    "max_tokens": (1, None),
    "max_completion_tokens": (1, None),
    "top_logprobs": (0, 20),
}


def validate_parameters(body: dict[str, Any]) -> None:
    """Unknown or internal parameters, and parameters of the wrong type (not messages)."""
    for key in body:
        if key not in CHAT_PARAMETERS:
            raise InvalidRequest(
                f"Unrecognized request argument supplied: {key}",
                code="unknown_parameter",
                param=key,
            )
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise invalid("model", "`model` is required and must be a non-empty string.")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "`messages` is required and must be a non-empty array.")
    check_types(body, _CHAT_KINDS)
    check_ranges(body, _CHAT_RANGES)
    _check_shapes(body)


def _check_shapes(body: dict[str, Any]) -> None:
    """The inside of the parameters that hold structure, as OpenAI's reference gives
    it: what a provider's translation would otherwise trip over (a 502 for the client's
    own mistake), a 400 naming the field."""
    check_strings(body.get("stop"), "stop")
    for number, tool in enumerate(body.get("tools") or ()):
        here = f"tools[{number}]"
        if type(tool) is not dict or type(tool.get("type")) is not str:
            raise invalid(here, f"`{here}` must be an object with a string `type`.")
        if tool["type"] == "function":
            check_function(tool.get("function"), f"{here}.function")
    for number, function in enumerate(body.get("functions") or ()):
        check_function(function, f"functions[{number}]")
    for name in ("tool_choice", "function_call", "response_format"):
        choice = body.get(name)
        if type(choice) is dict and type(choice.get("type", choice.get("name"))) is not str:
            raise invalid(f"{name}.type", f"`{name}.type` must be a string.")
    choice = body.get("tool_choice")
    if type(choice) is dict and choice.get("type") == "function":
        function = choice.get("function")
        if type(function) is not dict or type(function.get("name")) is not str:
            raise invalid("tool_choice.function", "`tool_choice.function` needs a string `name`.")


def check_strings(value: Any, where: str) -> None:
    """A 400 unless `value`, where it is a list, holds strings only."""
    if type(value) is not list:
        return
    for number, item in enumerate(value):
        if type(item) is not str:
            raise invalid(f"{where}[{number}]", f"`{where}[{number}]` must be a string.")


def check_function(
    function: Any, where: str, *, parameters: str = "parameters", required: bool = False
) -> None:
    """A function tool's definition: an object with a string `name`, its `parameters`
    (the JSON schema, `input_schema` for Anthropic) an object, `description` a string,
    `strict` a boolean, where given (`required`: the schema must be)."""
    if type(function) is not dict or type(function.get("name")) is not str:
        raise invalid(where, f"`{where}` must be an object with a string `name`.")
    schema = function.get(parameters)
    if (schema is not None or required) and type(schema) is not dict:
        raise invalid(f"{where}.{parameters}", f"`{where}.{parameters}` must be an object.")
    if function.get("description") is not None and type(function["description"]) is not str:
        raise invalid(f"{where}.description", f"`{where}.description` must be a string.")
    if function.get("strict") is not None and type(function["strict"]) is not bool:
        raise invalid(f"{where}.strict", f"`{where}.strict` must be a boolean.")


def check_ranges(body: dict[str, Any], ranges: dict[str, Range]) -> None:
    """A 400 for the first number present outside its range (after `check_types`)."""
    for name, (low, high) in ranges.items():
        value = body.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"at least {low}" if high is None else f"between {low} and {high}"
            raise invalid(name, f"`{name}` must be {bounds}, not {value}.")


def check_types(
    body: dict[str, Any], kinds: dict[str, str], *, anthropic: bool = False, where: str = ""
) -> None:
    """A 400 for the first parameter present (not null) that is not of its kind (a
    boolean is no number), worded as OpenAI's errors are, or as Anthropic's; `where`
    names the object they are fields of, if not the body."""
    for name, kind in kinds.items():
        value = body.get(name)
        if value is None:
            continue
        types, words = _KINDS[kind]
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            param = f"{where}.{name}" if where else name
            said = f"{param}: must be {words}." if anthropic else f"`{param}` must be {words}."
            raise invalid(param, said)


def validate_messages(
    messages: list[Any], start: int = 0, offset: int = 0, *, continues: bool = False
) -> None:
    """messages[start:] are well-formed: objects with a known role, string-or-parts
    content, well-typed fields, tool calls with unique ids, and tool results that answer a
    call of the assistant message before them. `offset` is the position of `messages` in
    the request's own list (for `param`); `continues`: the list may continue a stored
    conversation, so tool results at its very start may answer calls stored earlier."""
    # The common message (a known role, string content, no name) costs a few type checks:
    # a resent conversation of thousands is checked on every request without a session.
    roles, content_types = ROLES, _CONTENT_TYPES
    for index in range(start, len(messages)):
        message = messages[index]
        if type(message) is not dict:
            _reject(message, index + offset)
        role = message.get("role")
        content = message.get("content")
        kind = type(content)
        if type(role) is not str or role not in roles or kind not in content_types:
            _reject(message, index + offset)
        if kind is list:
            _check_parts(content, index + offset)
        elif content is None and role != "assistant":
            where = _where(index + offset)
            raise invalid(f"{where}.content", f"`{where}.content` is required.")
        if "name" in message and type(message["name"]) not in _NAME_TYPES:
            where = _where(index + offset)
            raise invalid(f"{where}.name", f"`{where}.name` must be a string.")
        if role == "assistant":
            if message.get("tool_calls") is not None:
                _check_calls(message["tool_calls"], index + offset)
        elif role == "tool":
            _check_result(messages, index, index + offset, continues)


# Conversations of no session held as validated: their messages, and their bodies' bytes
# (a 1.4 MB conversation of 5,000 messages is held; one larger is not: a hostile client's
# megabyte one-offs would hold their parsed messages, four to five times their bytes).
KEPT_VALIDATED = 20_000
KEPT_VALIDATED_BYTES = 2 << 20


class Validated:
    """Conversations of no session validated lately, held by their messages: one resent
    whose leading messages are those validated before (`shared_messages`: the very
    objects of a resent body's kept parse, `proxy.http.resends`, or of a door's kept
    translation) is validated from where it is new. Holding the messages keeps their
    identities theirs; what is held is bounded by messages and by their bodies' bytes,
    and a conversation larger than that is not held."""

    def __init__(self, kept: int = KEPT_VALIDATED, kept_bytes: int = KEPT_VALIDATED_BYTES) -> None:
        self._kept, self._kept_bytes = kept, kept_bytes
        self._held = 0  # messages
        self._bytes = 0  # their bodies'
        self._known: OrderedDict[int, tuple[list[Any], int]] = OrderedDict()
        self._lock = threading.Lock()  # validated in worker threads too

    def validate(self, messages: list[Any], offset: int = 0, size: int = 0) -> None:
        """`validate_messages(messages, offset=offset)`, from the first message that is not
        one held as validated at its place; `size`: the body's bytes, what holding weighs."""
        if not messages:
            return
        with self._lock:
            known = self._known.pop(id(messages[0]), None)
            if known is not None:
                self._held -= len(known[0])
                self._bytes -= known[1]
        start = 0
        if known is not None:
            start = shared_messages(messages, known[0])
        validate_messages(messages, start, offset)
        if len(messages) > self._kept or size > self._kept_bytes:
            return
        with self._lock:
            self._known[id(messages[0])] = list(messages), size
            self._held += len(messages)
            self._bytes += size
            while self._held > self._kept or self._bytes > self._kept_bytes:
                _, (dropped, weight) = self._known.popitem(last=False)
                self._held -= len(dropped)
                self._bytes -= weight


_CONTENT_TYPES = frozenset({str, list, type(None)})
_NAME_TYPES = frozenset({str, type(None)})


def _where(position: int) -> str:
    """A message's `param` (made only for an error: a message's checks make no string)."""
    return f"messages[{position}]"


def _check_parts(parts: list[Any], position: int) -> None:
    for number, part in enumerate(parts):
        if type(part) is not dict or type(part.get("type")) is not str:
            where = _where(position)
            raise invalid(
                f"{where}.content[{number}]",
                f"`{where}.content[{number}]` must be an object with a string `type`.",
            )
        if part["type"] == "text" and type(part.get("text")) is not str:
            where = _where(position)
            raise invalid(f"{where}.content[{number}].text", "A text part needs a string `text`.")


def _check_calls(calls: Any, position: int) -> None:
    if type(calls) is not list:
        where = _where(position)
        raise invalid(f"{where}.tool_calls", f"`{where}.tool_calls` must be an array.")
    seen: set[str] = set()
    for number, call in enumerate(calls):
        function = call.get("function") if type(call) is dict else None
        if (
            type(call) is not dict
            or type(call.get("id")) is not str
            or type(function) is not dict
            or type(function.get("name")) is not str
            or type(function.get("arguments", "")) is not str
        ):
            here = f"{_where(position)}.tool_calls[{number}]"
            raise invalid(
                here, f"`{here}` needs a string `id` and a `function` with a string `name`."
            )
        if call["id"] in seen:
            here = f"{_where(position)}.tool_calls[{number}]"
            raise invalid(f"{here}.id", f"Duplicate tool call id `{call['id']}`.")
        seen.add(call["id"])


def _check_result(messages: list[Any], index: int, position: int, continues: bool) -> None:
    """A tool result answers a call of the nearest assistant message before it, once."""
    call_id = messages[index].get("tool_call_id")
    where = _where(position)
    if type(call_id) is not str:
        raise invalid(f"{where}.tool_call_id", f"`{where}.tool_call_id` must be a string.")
    earlier = index - 1
    while (
        earlier >= 0 and type(messages[earlier]) is dict and messages[earlier].get("role") == "tool"
    ):
        if messages[earlier].get("tool_call_id") == call_id:
            raise invalid(f"{where}.tool_call_id", f"Tool call `{call_id}` is answered twice.")
        earlier -= 1
    if earlier < 0 and continues:
        return  # answers a call stored with the session
    calls = messages[earlier].get("tool_calls") if earlier >= 0 else None
    ids = {call.get("id") for call in calls or () if type(call) is dict}
    if call_id not in ids:
        raise invalid(
            f"{where}.tool_call_id",
            f"`{where}` answers tool call `{call_id}`, which no assistant message before it made.",
        )


def _reject(message: Any, position: int) -> None:
    where = _where(position)
    if not isinstance(message, dict):
        raise invalid(where, f"`{where}` must be an object.")
    role = message.get("role")
    if type(role) is not str or role not in ROLES:
        raise invalid(f"{where}.role", f"`{where}.role` must be one of {sorted(ROLES)}.")
    raise invalid(f"{where}.content", f"`{where}.content` must be a string or array.")


def invalid(param: str, message: str) -> InvalidRequest:
    return InvalidRequest(message, code="invalid_value", param=param)


def session_id(value: str, where: str) -> str:
    """`value` if it is a usable session id, else a 400 naming `where`."""
    if not _SESSION_ID.fullmatch(value):
        raise _invalid_session_id(
            where, "a session id is 1-256 characters, with no control character or line separator."
        )
    return value


def header_session_id(value: str, where: str) -> str:
    """A session id sent in a header: its bytes (which Starlette reads as latin-1) as
    UTF-8, so a unicode id arrives whole from a client that sends it as UTF-8."""
    try:
        text = value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise _invalid_session_id(where, "a session id header must be UTF-8.") from None
    return session_id(text, where)


def _invalid_session_id(where: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: {why}", code="invalid_session_id", param=where)
