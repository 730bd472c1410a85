"""The fuzz benchmark's requests: what an attacker sends to the three doors.

Case `index` of seed `seed` is always the same request (its own `random.Random`), so a
run is reproducible and any case can be sent again alone (`fuzz --case N`). The first
cases are the guaranteed ones, in order: every repro of issue 51 and every way the
upstream misbehaves (`fuzz_upstream`) on every door, streamed and not; then a mix:

- `MUTATED` of them: a valid body (any door, any of the three models, streamed or
  not, with or without a session) with 1-3 structural mutations: a wrong type at any
  path, a deletion, huge and NaN-like numbers, unicode oddities, huge arrays, deep
  nesting, duplicate ids and keys, unknown roles and fields, odd headers; or a body
  that is no JSON object at all;
- `HOSTILE_UPSTREAM`: a valid body whose last user message asks the upstream to
  misbehave;
- `REPRO`: one of the issue's repros again;
- the rest: valid bodies, which must be answered 200.
"""

from __future__ import annotations

import base64
import copy
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

CHAT, CLAUDE, RESPONSES = "fuzz-chat", "fuzz-claude", "fuzz-responses"
MODELS = (CHAT, CLAUDE, RESPONSES)
PATHS = {
    "chat": "/v1/chat/completions",
    "messages": "/v1/messages",
    "count_tokens": "/v1/messages/count_tokens",
    "responses": "/v1/responses",
}
SESSIONS = 2000  # session ids drawn from this many: some grow, most stay short
MUTATED, HOSTILE_UPSTREAM, REPRO = 0.78, 0.10, 0.07  # the rest valid
# How often each way of misbehaving is asked for among the hostile upstreams: the
# huge ones cost seconds each, the others milliseconds.
UPSTREAM_WEIGHTS = {"huge": 0.3, "endless-event": 0.3, "error-event": 2, "cut": 2}
UPSTREAM_WEIGHTS |= {"not-json": 2, "wrong-shape": 2}
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "the",
    "a",
    "of",
    "to",
    "deploy",
    "fix",
    "cache",
    "river",
    "seven",
    "42",
    "käse",
    "東京",
]


class Raw:
    """JSON text put into a body as is (what `orjson` will not write: NaN, a 400-digit
    number, a lone surrogate, 300 levels of nesting, an escaped key). Not a dataclass:
    orjson would write one as an object."""

    __slots__ = ("text",)

    def __init__(self, text: bytes) -> None:
        self.text = text


@dataclass
class Case:
    index: int
    kind: str  # "valid", "repro: …", "mutated: …", "upstream: …"
    door: str  # a key of PATHS
    model: str
    body: bytes
    stream: bool
    headers: dict[str, str] = field(default_factory=dict)
    upstream: str | None = None  # the misbehaviour asked of the upstream

    @property
    def path(self) -> str:
        return PATHS[self.door]


_PLACEHOLDER = re.compile(rb'"\\u001fraw(\d+)\\u001f"')


def dumps(body: Any) -> bytes:
    """`body` as JSON, each `Raw` as its text."""
    raws: list[bytes] = []

    def placeholder(value: Any) -> str:
        if not isinstance(value, Raw):
            raise TypeError(type(value).__name__)
        raws.append(value.text)
        return f"\x1fraw{len(raws) - 1}\x1f"

    out = orjson.dumps(body, default=placeholder)
    return _PLACEHOLDER.sub(lambda found: raws[int(found[1])], out) if raws else out


def nested(depth: int, leaf: bytes = b'"x"') -> Raw:
    """`depth` levels of objects and arrays in turn."""
    opening = b"".join(b'{"a":' if n % 2 == 0 else b"[" for n in range(depth))
    closing = b"".join(b"}" if n % 2 == 0 else b"]" for n in reversed(range(depth)))
    return Raw(opening + leaf + closing)


def words(rng: random.Random, low: int = 3, high: int = 60) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(low, high)))


# -- valid bodies, in each door's own shape ------------------------------------------

CHAT_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
SCHEMA = CHAT_TOOL["function"]["parameters"]  # type: ignore[index]


def chat_body(rng: random.Random, model: str, text: str, stream: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if rng.random() < 0.7:
        messages.append({"role": "system", "content": "You are terse. " + words(rng, 1, 8)})
    for _ in range(rng.choice((0, 0, 1, 3))):
        said = words(rng)
        messages += [{"role": "user", "content": said}, {"role": "assistant", "content": said}]
    body: dict[str, Any] = {"model": model, "max_tokens": 64, "temperature": 0.3}
    if rng.random() < 0.4:
        call: dict[str, Any] = {"id": f"call_{rng.randrange(10**6)}", "type": "function"}
        call["function"] = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
        messages += [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
        ]
        body["tools"] = [copy.deepcopy(CHAT_TOOL)]
    content: Any = text if rng.random() < 0.7 else [{"type": "text", "text": text}]
    body["messages"] = [*messages, {"role": "user", "content": content}]
    if stream:
        body["stream"] = True
        if rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
    return body


def messages_body(rng: random.Random, model: str, text: str, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": 64}
    if rng.random() < 0.5:
        body["system"] = "You are terse."
    elif rng.random() < 0.5:
        mark = {"type": "ephemeral"}
        body["system"] = [{"type": "text", "text": "You are terse.", "cache_control": mark}]
    messages: list[dict[str, Any]] = []
    for _ in range(rng.choice((0, 0, 1, 3))):
        said = words(rng)
        messages += [{"role": "user", "content": said}, {"role": "assistant", "content": said}]
    last: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if rng.random() < 0.4:
        use: dict[str, Any] = {"type": "tool_use", "id": f"toolu_{rng.randrange(10**6)}"}
        use |= {"name": "get_weather", "input": {"city": "Paris"}}
        messages += [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [{"type": "text", "text": "Checking."}, use]},
        ]
        last.insert(0, {"type": "tool_result", "tool_use_id": use["id"], "content": "sunny"})
        body["tools"] = [
            {
                "name": "get_weather",
                "description": "The weather.",
                "input_schema": copy.deepcopy(SCHEMA),
            }
        ]
    body["messages"] = [*messages, {"role": "user", "content": last}]
    if rng.random() < 0.3:
        body["metadata"] = {"user_id": "fuzz-user"}
    if rng.random() < 0.3:
        body["stop_sequences"] = ["STOP"]
    if stream:
        body["stream"] = True
    return body


def responses_body(rng: random.Random, model: str, text: str, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model}
    if rng.random() < 0.6:
        body["instructions"] = "You are terse."
    items: list[dict[str, Any]] = []
    for _ in range(rng.choice((0, 0, 1, 3))):
        said = words(rng)
        items.append({"type": "message", "role": "user", "content": said})
        answer = [{"type": "output_text", "text": said}]
        items.append({"type": "message", "role": "assistant", "content": answer})
    if rng.random() < 0.4:
        call_id = f"call_{rng.randrange(10**6)}"
        items += [
            {"type": "message", "role": "user", "content": "weather?"},
            {"type": "function_call", "call_id": call_id, "name": "get_weather"}
            | {"arguments": '{"city": "Paris"}'},
            {"type": "function_call_output", "call_id": call_id, "output": "sunny"},
        ]
        tool = {"type": "function", "name": "get_weather", "description": "The weather."}
        body["tools"] = [tool | {"parameters": copy.deepcopy(SCHEMA)}]
    user = {"type": "input_text", "text": text}
    items.append({"type": "message", "role": "user", "content": [user]})
    body["input"] = text if not items[:-1] and rng.random() < 0.5 else items
    if rng.random() < 0.3:
        body["text"] = {"format": {"type": "text"}}
    if rng.random() < 0.3:
        body["metadata"] = {"k": "v"}
    if rng.random() < 0.3:
        body["store"] = False
    if stream:
        body["stream"] = True
    return body


BUILDERS: dict[str, Callable[[random.Random, str, str, bool], dict[str, Any]]] = {
    "chat": chat_body,
    "messages": messages_body,
    "count_tokens": messages_body,
    "responses": responses_body,
}


def valid(rng: random.Random, index: int, door: str, model: str, stream: bool) -> dict[str, Any]:
    return BUILDERS[door](rng, model, f"[case {index}] {words(rng)}", stream)


# -- the repros ----------------------------------------------------------------

Repro = tuple[str, str, str, bool, bool, Callable[[random.Random], Any]]
LOREM = "lorem ipsum dolor sit amet "


def _user(text: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def _chat(**fields: Any) -> Callable[[random.Random], Any]:
    return lambda rng: {"model": CLAUDE, "messages": _user("hi"), **fields}


def _deep_text(model: str, stream: bool) -> Callable[[random.Random], Any]:
    return lambda rng: {"model": model, "input": "hi", "stream": stream, "text": nested(300)}


def _deep_metadata(stream: bool) -> Callable[[random.Random], Any]:
    body = {"model": CLAUDE, "max_tokens": 64, "messages": _user("hi"), "stream": stream}
    return lambda rng: body | {"metadata": nested(300)}


def _untyped_result(inside: bool) -> Callable[[random.Random], Any]:
    return lambda rng: _with_result(
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"text": "sunny"}]}
        if inside
        else {"tool_use_id": "toolu_1", "content": "sunny"}
    )


def _with_result(result: dict[str, Any]) -> Any:
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]},
    ]
    return {"model": CLAUDE, "max_tokens": 64, "messages": messages}


def _escaped_marks(rng: random.Random) -> Any:
    key = Raw(b'"cache\\u005fcontrol"')  # a key orjson cannot write escaped
    system = [{"type": "text", "text": f"block {n}", "KEY": 1} for n in range(4)]
    body = {"model": CLAUDE, "max_tokens": 64, "system": system, "messages": _user("hi")}
    text = dumps(body).replace(b'"KEY":1', key.text + b':{"type":"ephemeral"}')
    return Raw(text)


def _five_marks(rng: random.Random) -> Any:
    mark = {"type": "ephemeral"}
    system = [{"type": "text", "text": f"block {n}", "cache_control": mark} for n in range(5)]
    return {"model": CLAUDE, "max_tokens": 64, "system": system, "messages": _user("hi")}


# (name, door, model, stream, session, body)
REPROS: list[Repro] = [
    (
        "4.3 MB message",
        "messages",
        CLAUDE,
        False,
        session,
        lambda rng: {"model": CLAUDE, "max_tokens": 64, "messages": _user(LOREM * 160_000)},
    )
    for session in (False, True)
]
REPROS += [
    (
        "2 MB message without spaces",
        "chat",
        CHAT,
        False,
        False,
        lambda rng: {
            "model": CHAT,
            "messages": _user(base64.b64encode(rng.randbytes(3 << 19)).decode()),
        },
    ),
    ("stop [['x']] to Claude", "chat", CLAUDE, False, False, _chat(stop=[["x"]])),
    ("tools[0].type: 3", "chat", CLAUDE, False, False, _chat(tools=[{**CHAT_TOOL, "type": 3}])),
    (
        "parameters: 2**63",
        "chat",
        CLAUDE,
        False,
        False,
        _chat(tools=[{"type": "function", "function": {"name": "f", "parameters": 2**63}}]),
    ),
    (
        "a tool without type",
        "chat",
        CLAUDE,
        False,
        False,
        _chat(tools=[{"function": CHAT_TOOL["function"]}]),
    ),
    (
        "Responses to Claude, tools[0].parameters a list",
        "responses",
        CLAUDE,
        False,
        False,
        lambda rng: {
            "model": CLAUDE,
            "input": "hi",
            "tools": [{"type": "function", "name": "f", "parameters": [1, "x", {}]}],
        },
    ),
]
REPROS += [
    (
        f"text nested 300 levels to {model}",
        "responses",
        model,
        stream,
        False,
        _deep_text(model, stream),
    )
    for model in (CLAUDE, RESPONSES)
    for stream in (False, True)
]
REPROS += [
    ("metadata nested 300 levels", "messages", CLAUDE, s, False, _deep_metadata(s))
    for s in (False, True)
]
REPROS += [
    (
        f"tool_result{where} without type{' (count_tokens)' if door == 'count_tokens' else ''}",
        door,
        CLAUDE,
        False,
        False,
        _untyped_result(inside),
    )
    for inside, where in ((True, "'s part"), (False, ""))
    for door in ("messages", "count_tokens")
]
REPROS += [
    ("four escaped cache_control marks", "messages", CLAUDE, False, True, _escaped_marks),
    ("five cache marks of the client's own", "messages", CLAUDE, False, True, _five_marks),
    (
        "container MODE:e404",
        "messages",
        CLAUDE,
        False,
        False,
        lambda rng: (
            {"model": CLAUDE, "max_tokens": 64, "messages": _user("hi")}
            | {"container": "MODE:e404"}
        ),
    ),
]
# How often each repro comes again in the mix: the huge ones cost seconds each.
REPRO_WEIGHTS = [0.15 if "MB" in name else 1.0 for name, *_ in REPROS]
