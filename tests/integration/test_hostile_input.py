"""Hostile input never yields a 5xx: generated bodies, headers, paths and queries, each
with at least one defect, sent to every route of a real proxy. Each answer must be an
OpenAI-shaped 4xx; afterwards the stored sessions are byte-for-byte what they were and
the upstream was never called."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.conversation.validation import CHAT_PARAMETERS, ROLES
from tests.proxies import MODEL, proxy_config
from tests.upstream import FakeUpstream

KEY_A, KEY_B, ADMIN = "hostile-key-a-0123456789", "hostile-key-b-0123456789", "hostile-admin-012345"
MAX_BODY = 64 * 1024
SEEDED = {KEY_A: ["seed-a1", "seed-a2"], KEY_B: ["seed-b1"]}


class Proxy:
    """A real proxy for the whole module (hypothesis runs thousands of examples)."""

    def __init__(self, url: str, sessions_dir: Path, upstream: FakeUpstream) -> None:
        self.url = url
        self.database = sessions_dir / "sessions.sqlite3"
        self.upstream = upstream
        self.client = httpx.Client(base_url=url, timeout=30)
        self.sent = 0

    def send(
        self, method: str, path: str, headers: dict[str, Any], body: bytes = b""
    ) -> dict[str, Any]:
        """The error the proxy answered (a 4xx, OpenAI- or Anthropic-shaped), and its
        status as `_status`."""
        response = self.client.request(method, path, headers=headers, content=body or None)
        self.sent += 1
        assert 400 <= response.status_code < 500, (
            f"{method} {path} {headers} {body[:300]!r} -> {response.status_code} {response.text}"
        )
        assert response.headers.get("content-type") == "application/json", response.text
        if path.startswith("/v1/messages"):  # Anthropic's shape
            assert response.json()["type"] == "error", response.text
            error = response.json()["error"]
            assert set(error) == {"type", "message"}, response.text
        else:
            error = response.json()["error"]
            assert set(error) == {"message", "type", "code", "param"}, response.text
        assert isinstance(error["message"], str) and error["message"]
        return error | {"_status": response.status_code}

    def snapshot(self) -> list[list[tuple[Any, ...]]]:
        """Every stored row, exactly as stored."""
        with sqlite3.connect(self.database) as db:
            return [
                db.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3").fetchall()
                for table in ("sessions", "messages", "checkpoints")
            ]


@pytest.fixture(scope="module")
def sessions_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile") / "sessions"


@pytest.fixture(scope="module")
def module_url_config(_shared_upstream: FakeUpstream, sessions_dir: Path) -> dict[str, Any]:
    return proxy_config(
        _shared_upstream,
        server={"max_body_bytes": MAX_BODY},
        session={"path": str(sessions_dir)},
        auth={
            "keys": [{"key": KEY_A, "tenant": "team-a"}, {"key": KEY_B, "tenant": "team-b"}],
            "admin_keys": [{"key": ADMIN}],
        },
    )


@pytest.fixture(scope="module")
def proxy(module_url: str, sessions_dir: Path, _shared_upstream: FakeUpstream) -> Proxy:
    """The module's proxy, each tenant's sessions seeded (three turns each)."""
    seeded = Proxy(url=module_url, sessions_dir=sessions_dir, upstream=_shared_upstream)
    for key, names in SEEDED.items():
        for name in names:
            for turn in range(3):
                body = {"model": MODEL, "messages": [{"role": "user", "content": f"t{turn}"}]}
                answer = seeded.client.post(
                    "/v1/chat/completions",
                    json=body,
                    headers={"authorization": f"Bearer {key}", "x-session-id": name},
                )
                assert answer.status_code == 200
    return seeded


@pytest.fixture(scope="module")
def before(proxy: Proxy) -> list[list[tuple[Any, ...]]]:
    """The store after seeding; every test leaves it exactly so."""
    return proxy.snapshot()


@pytest.fixture(autouse=True)
def nothing_stored_changed_and_nothing_went_upstream(
    proxy: Proxy, before: Any, request: pytest.FixtureRequest
) -> Iterator[None]:
    """Checked after each test on its own (whatever ran before it): every example the
    test drew was sent, the store holds byte for byte what it held after seeding, and
    nothing reached the upstream."""
    proxy.upstream.requests.clear()
    sent = proxy.sent
    yield
    assert proxy.sent - sent >= EXAMPLES[request.node.originalname]
    assert proxy.snapshot() == before
    assert proxy.upstream.chat_requests() == []


# -- what a body is made of ---------------------------------------------------------------

floats = st.floats(allow_nan=False, allow_infinity=False)  # JSON has neither
ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)  # what orjson writes
scalars = st.none() | st.booleans() | ints | floats | st.text()
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
texts = st.text(max_size=200) | st.text(alphabet="\x00\x01\x1f\u2028\ud7ff\ufffe", max_size=20)
plain_messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant"]), "content": texts}
    ),
    min_size=1,
    max_size=4,
)
ids = st.text(min_size=1, max_size=12)


def call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


# Message lists with one defect each.
bad_messages = st.one_of(
    # an unknown role
    st.builds(
        lambda m, role: [*m, {"role": role, "content": "x"}],
        plain_messages,
        st.text().filter(lambda r: r not in ROLES),
    ),
    # content of a wrong type
    st.builds(
        lambda m, c: [*m, {"role": "user", "content": c}],
        plain_messages,
        ints | floats | st.booleans() | st.dictionaries(st.text(), scalars),
    ),
    # parts that are not part objects (nested lists included)
    st.builds(
        lambda m, parts: [*m, {"role": "user", "content": parts}],
        plain_messages,
        st.lists(ints | st.text() | st.lists(json_values, max_size=2), min_size=1)
        | st.just([{"type": "text", "text": 5}])
        | st.just([{"text": "no type"}]),
    ),
    # a name that is no string
    st.builds(
        lambda m, name: [*m, {"role": "user", "content": "x", "name": name}],
        plain_messages,
        ints | st.lists(st.text(), max_size=2) | st.booleans(),
    ),
    # a tool result answering no call
    st.builds(
        lambda m, i: [
            *m,
            {"role": "user", "content": "x"},
            {"role": "tool", "tool_call_id": i, "content": "r"},
        ],
        plain_messages,
        ids,
    ),
    # a tool result whose id is no string
    st.builds(
        lambda i: [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
            {"role": "tool", "tool_call_id": i, "content": "r"},
        ],
        ints | st.none() | st.lists(st.text(), max_size=1),
    ),
    # duplicate tool call ids
    st.builds(
        lambda i: [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None, "tool_calls": [call(i), call(i)]},
            {"role": "tool", "tool_call_id": i, "content": "r"},
        ],
        ids,
    ),
    # one call answered twice
    st.builds(
        lambda i: [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": None, "tool_calls": [call(i)]},
            {"role": "tool", "tool_call_id": i, "content": "r"},
            {"role": "tool", "tool_call_id": i, "content": "r"},
        ],
        ids,
    ),
    # tool calls of the wrong shape
    st.builds(
        lambda calls: [
            {"role": "user", "content": "x"},
            {"role": "assistant", "tool_calls": calls},
        ],
        json_values.filter(lambda v: not isinstance(v, list) and v is not None)
        | st.lists(json_values.filter(lambda v: not isinstance(v, dict)), min_size=1)
        | st.just([{"id": 1, "function": {"name": "f"}}])
        | st.just([{"id": "a", "function": "f"}]),
    ),
    # not a message at all
    st.builds(lambda m, x: [*m, x], plain_messages, scalars | st.lists(scalars, max_size=2)),
    # no messages, or no list of them
    st.just([]),
)

_TYPED = {
    "temperature": st.text() | st.booleans() | st.lists(ints, max_size=1),
    "top_p": st.text() | st.dictionaries(st.text(), ints, max_size=1),
    "n": floats | st.text() | st.booleans(),
    "max_tokens": st.text() | st.booleans() | st.just(1.5),
    "seed": st.text() | st.just(2.5),
    "stream": ints | st.text() | st.lists(st.booleans(), max_size=1),
    "tools": st.dictionaries(st.text(), ints, max_size=1) | st.text() | ints,
    "stream_options": st.lists(ints, max_size=1) | st.text() | ints,
    "response_format": st.text() | ints | st.lists(st.text(), max_size=1),
}


def valid_body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": MODEL, "messages": messages}


# Bodies (as JSON values) with one defect each.
bad_json_bodies = st.one_of(
    st.builds(valid_body, bad_messages),
    st.builds(
        lambda m, item: valid_body(m) | dict([item]),
        plain_messages,
        st.sampled_from(sorted(_TYPED)).flatmap(lambda k: _TYPED[k].map(lambda v: (k, v))),
    ),
    st.builds(
        lambda m, k, v: valid_body(m) | {k: v},
        plain_messages,
        st.text(min_size=1).filter(lambda k: k not in CHAT_PARAMETERS),
        json_values,
    ),
    st.builds(
        lambda m, v: valid_body(m) | {"api_base": v},
        plain_messages,
        st.just("http://127.0.0.1:9/") | json_values,
    ),
    st.builds(lambda m: {"messages": m}, plain_messages),
    st.builds(
        lambda m, v: {"model": v, "messages": m},
        plain_messages,
        ints | st.just("") | st.lists(st.text(), max_size=1) | st.none(),
    ),
    st.builds(
        lambda m, name: {"model": name, "messages": m},
        plain_messages,
        st.text(min_size=1).filter(lambda n: n.strip() and n != MODEL),
    ),
    st.builds(
        lambda v: {"model": MODEL, "messages": v}, scalars | st.dictionaries(st.text(), scalars)
    ),
    scalars | st.lists(json_values, max_size=3),  # not an object
)


def encode(body: Any) -> bytes:
    return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)


# Bodies as bytes: the JSON ones, and bytes that are no JSON object at all.
bad_bytes = st.one_of(
    bad_json_bodies.map(encode),
    # invalid UTF-8 inside a string
    st.builds(
        lambda m, junk: encode(valid_body(m)).replace(b'"user"', b'"us' + junk + b'er"', 1),
        plain_messages.filter(lambda m: any(x["role"] == "user" for x in m)),
        st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]),
    ),
    # NaN and Infinity, which are no JSON
    st.builds(
        lambda literal: (
            b'{"model": "'
            + MODEL.encode()
            + b'", "temperature": '
            + literal
            + b', "messages": [{"role": "user", "content": "x"}]}'
        ),
        st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"nan", b"1e999999"]),
    ),
    # nesting deeper than any parser allows, and deep but parseable
    st.integers(min_value=1100, max_value=5000).map(
        lambda depth: (
            b'{"model": "'
            + MODEL.encode()
            + b'", "messages": [{"role": "user", "content": '
            + b"[" * depth
            + b"]" * depth
            + b"}]}"
        )
    ),
    st.integers(min_value=50, max_value=900).map(
        lambda depth: (
            b'{"model": "'
            + MODEL.encode()
            + b'", "messages": [{"role": "user", "content": ['
            + b"[" * depth
            + b"]" * depth
            + b"]}]}"
        )
    ),
    # cut short
    st.builds(
        lambda m, cut: encode(valid_body(m))[: max(0, len(encode(valid_body(m))) - cut)],
        plain_messages,
        st.integers(min_value=1, max_value=30),
    ),
    # larger than the body limit
    st.integers(min_value=MAX_BODY, max_value=MAX_BODY * 19 // 10).map(
        lambda size: encode(valid_body([{"role": "user", "content": "x" * size}]))
    ),
    st.binary(max_size=200).filter(lambda b: not b.strip().startswith(b"{")),
)


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


# Header values with a defect (as bytes: h11 sends obs-text, not control characters):
# too long, not UTF-8, or UTF-8 for a control character or line separator.
bad_session_ids = st.one_of(
    st.integers(min_value=257, max_value=2000).map(lambda n: b"s" * n),
    st.integers(min_value=257, max_value=600).map(lambda n: "é".encode() * n),
    st.binary(min_size=1, max_size=20)
    .map(lambda b: b"s" + bytes(c | 0x80 for c in b))
    .filter(lambda b: not _utf8(b)),
    st.sampled_from(["\x85", "\x9f", "\u2028", "\u2029"]).map(lambda c: f"s{c}s".encode()),
)
bad_headers = st.one_of(
    bad_session_ids.map(lambda v: {"x-session-id": v}),
    # (visible characters: the HTTP server itself turns control characters away)
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=10)
    .filter(lambda v: v.lower() not in ("append", "full", "auto", ""))
    .map(lambda v: {"x-session-id": b"seed-a1", "x-session-mode": v.encode()}),
    st.sampled_from(["2", "0.01", "-1", "nan", "inf", "lots", "0x10", "1e9"]).map(
        lambda v: {"x-session-id": b"seed-a1", "x-context-budget-ratio": v.encode()}
    ),
)


def auth(key: str = KEY_A) -> dict[str, Any]:
    return {"authorization": f"Bearer {key}", "content-type": "application/json"}


hostile_auth = st.one_of(
    st.text(alphabet="abcdef0123456789-", min_size=1, max_size=40).map(lambda t: f"Bearer {t}"),
    st.just("Basic dXNlcjpwYXNz"),
    st.binary(min_size=1, max_size=30).map(lambda b: b"Bearer " + bytes(c | 0x80 for c in b)),
)

# Path segments: not usable as a session id, or usable but never one that exists.
bad_path_ids = st.one_of(
    bad_session_ids.map(lambda b: quote(b, safe="")),
    st.text(alphabet="\x00\x01\x1f\x7f ", min_size=1, max_size=5).map(
        lambda t: quote("s" + t, safe="")
    ),
    st.text(alphabet="abc-_.", min_size=1, max_size=20).map(lambda t: "h" + t),
)

# The examples each test sends (at least: one per example drawn), the types' for each door.
EXAMPLES = {
    "test_every_field_of_the_wrong_type_is_a_400_naming_it": 2400,
    "test_chat_completions": 4000,
    "test_messages": 1500,
    "test_responses": 1500,
    "test_preview": 2000,
    "test_read_session": 1200,
    "test_delete_session": 1200,
    "test_list_sessions": 1000,
    "test_models": 600,
}
SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]


def conditions(count: int) -> Any:
    return settings(max_examples=count, deadline=None, suppress_health_check=SLOW, database=None)


@conditions(EXAMPLES["test_chat_completions"])
@given(
    data=st.one_of(
        bad_bytes.map(lambda b: (b, {})),
        st.tuples(plain_messages.map(lambda m: encode(valid_body(m))), bad_headers),
        st.tuples(
            plain_messages.map(lambda m: encode(valid_body(m))),
            hostile_auth.map(lambda a: {"authorization": a}),
        ),
    ),
    session=st.sampled_from([None, b"seed-a1", b"seed-b1", b"fresh"]),
)
def test_chat_completions(proxy: Proxy, before: Any, data: Any, session: bytes | None) -> None:
    body, extra = data
    headers = auth() | ({"x-session-id": session} if session else {}) | extra
    proxy.send("POST", "/v1/chat/completions", headers, body)


# Messages API bodies with one defect each (a chat body is one too: no `max_tokens`).
def messages_body(messages: Any, **more: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 16, "messages": messages, **more}


def user(content: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content}]


USE = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
bad_messages_bodies = st.one_of(
    texts.map(lambda t: {"model": MODEL, "messages": user(t)}),
    st.sampled_from([0, -1, "16", None, True, 1.5]).flatmap(
        lambda n: texts.map(lambda t: messages_body(user(t)) | {"max_tokens": n})
    ),
    st.sampled_from(
        [
            [{"role": "system", "content": "x"}],
            [{"role": "tool", "content": "x"}],
            user(7),
            user([{"text": "no type"}]),
            user([{"type": "tool_result", "content": "no id"}]),
            user([{"type": "tool_result", "tool_use_id": "nobody", "content": "x"}]),
            user([{"type": "image", "source": {"type": "base64"}}]),
            user([{"type": "server_tool_use", "id": "x"}]),
            [{"role": "assistant", "content": [{"type": "tool_use", "name": "f"}]}],
            [*user("a"), {"role": "assistant", "content": [USE, USE]}],
            [],
            "messages",
        ]
    ).map(messages_body),
    st.sampled_from(
        [
            {"system": 5},
            {"system": [{"type": "image"}]},
            {"tools": [{"name": 5, "input_schema": {}}]},
            {"tools": ["web_search"]},
            {"tool_choice": {"type": "anything"}},
            {"output_config": "high"},
            {"stream": "yes"},
        ]
    ).flatmap(lambda extra: texts.map(lambda t: messages_body(user(t), **extra))),
)


@conditions(EXAMPLES["test_messages"])
@given(body=st.one_of(bad_messages_bodies.map(encode), bad_bytes))
def test_messages(proxy: Proxy, before: Any, body: bytes) -> None:
    proxy.send("POST", "/v1/messages", auth() | {"x-session-id": "seed-a1"}, body)


def responses_body(source: Any, **more: Any) -> dict[str, Any]:
    return {"model": MODEL, "input": source, **more}


bad_responses_bodies = st.one_of(
    st.sampled_from(
        [
            None,
            7,
            [],
            [{"type": "message", "role": "tool", "content": "x"}],
            [{"type": "function_call", "name": "f", "arguments": "{}"}],
            [{"type": "function_call_output", "call_id": "nobody", "output": "x"}],
            [{"type": "function_call_output", "call_id": "c", "output": 5}],
            [{"role": "user", "content": [{"type": "input_audio"}]}],
            [{"type": "item_reference", "id": "x"}],
            [{"type": "reasoning", "summary": []}],
        ]
    ).map(responses_body),
    st.sampled_from(
        [
            {"instructions": 5},
            {"tools": [{"type": 5}]},
            {"tool_choice": {"type": "nope"}},
            {"previous_response_id": "resp_forged.3.c2VlZC1hMQ"},
            {"previous_response_id": 12},
            {"background": True},
            {"stream": "yes"},
        ]
    ).flatmap(lambda extra: texts.map(lambda t: responses_body(t, **extra))),
)


@conditions(EXAMPLES["test_responses"])
@given(body=st.one_of(bad_responses_bodies.map(encode), bad_bytes))
def test_responses(proxy: Proxy, before: Any, body: bytes) -> None:
    proxy.send("POST", "/v1/responses", auth() | {"x-session-id": "seed-b1"}, body)


# -- every field of each door's schema, of a wrong JSON type --------------------------------

# Each field's JSON kinds, from the providers' API references (not from the proxy's code).
_OBJECT, _ARRAY, _STRING = ("object",), ("array",), ("string",)
_NUMBER, _INTEGER, _BOOLEAN = ("number", "integer"), ("integer",), ("boolean",)
CHAT_SCHEMA: dict[str, tuple[str, ...]] = {
    "model": _STRING,
    "messages": _ARRAY,
    **dict.fromkeys(("temperature", "top_p", "presence_penalty", "frequency_penalty"), _NUMBER),
    **dict.fromkeys(("n", "max_tokens", "max_completion_tokens", "seed", "top_logprobs"), _INTEGER),
    **dict.fromkeys(("stream", "logprobs", "parallel_tool_calls", "store"), _BOOLEAN),
    **dict.fromkeys(("tools", "functions", "modalities"), _ARRAY),
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
        _OBJECT,
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
        _STRING,
    ),
    "stop": ("string", "array"),
    "tool_choice": ("string", "object"),
    "function_call": ("string", "object"),
    "messages[0].role": _STRING,
    "messages[0].content": ("string", "array"),
    "messages[0].name": _STRING,
    "messages[1].tool_calls": _ARRAY,
    "messages[2].tool_call_id": _STRING,
}
MESSAGES_SCHEMA: dict[str, tuple[str, ...]] = {
    "model": _STRING,
    "max_tokens": _INTEGER,
    "messages": _ARRAY,
    "system": ("string", "array"),
    "stream": _BOOLEAN,
    **dict.fromkeys(("temperature", "top_p"), _NUMBER),
    "top_k": _INTEGER,
    **dict.fromkeys(("stop_sequences", "tools"), _ARRAY),
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
        _OBJECT,
    ),
    **dict.fromkeys(("inference_geo", "service_tier", "speed"), _STRING),
    "container": ("string", "object"),
    "messages[0].role": _STRING,
    "messages[0].content": ("string", "array"),
}
RESPONSES_SCHEMA: dict[str, tuple[str, ...]] = {
    "model": _STRING,
    "input": ("string", "array"),
    "instructions": _STRING,
    **dict.fromkeys(("stream", "store", "background", "parallel_tool_calls"), _BOOLEAN),
    **dict.fromkeys(("temperature", "top_p"), _NUMBER),
    **dict.fromkeys(("max_output_tokens", "max_tool_calls", "top_logprobs"), _INTEGER),
    **dict.fromkeys(("tools", "include", "context_management"), _ARRAY),
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
        _OBJECT,
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
        _STRING,
    ),
    "tool_choice": ("string", "object"),
    "conversation": ("string", "object"),
    "input[0].role": _STRING,
    "input[0].content": ("string", "array"),
    "input[1].type": _STRING,
    "input[1].call_id": _STRING,
    "input[1].name": _STRING,
    "input[1].arguments": _STRING,
    "input[2].call_id": _STRING,
    "input[2].output": ("string", "array"),
}
_VALUES = {
    "boolean": st.booleans(),
    "integer": ints,
    "number": floats.filter(lambda x: x != int(x)),
    "string": st.text(max_size=20),
    "array": st.lists(scalars, max_size=3),
    "object": st.dictionaries(st.text(max_size=8), scalars, max_size=3),
}


def wrong_values(kinds: tuple[str, ...]) -> Any:
    """Any JSON value of a kind the field does not take (null is absent, so taken)."""
    allowed = set(kinds) | ({"integer"} if "number" in kinds else set())
    return st.one_of(*(values for kind, values in _VALUES.items() if kind not in allowed))


def mistyped(base: dict[str, Any], schema: dict[str, tuple[str, ...]]) -> Any:
    """(field, body): `base` with one field of `schema` set to a wrong-typed value."""

    def put(field: str, value: Any) -> tuple[str, dict[str, Any]]:
        body = orjson.loads(orjson.dumps(base))
        path = field.replace("]", "").replace("[", ".").split(".")
        target = body
        for step in path[:-1]:
            target = target[int(step)] if step.isdigit() else target[step]
        target[path[-1]] = value
        return field, body

    return st.sampled_from(sorted(schema)).flatmap(
        lambda field: wrong_values(schema[field]).map(lambda value: put(field, value))
    )


CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
CHAT_BASE = {
    "model": MODEL,
    "messages": [
        {"role": "user", "content": "x", "name": "ann"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ],
}
MESSAGES_BASE = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "x"}]}
RESPONSES_BASE = {
    "model": MODEL,
    "input": [
        {"role": "user", "content": "x"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "r"},
    ],
}


def named(field: str, error: dict[str, Any], openai_shaped: bool) -> bool:
    """Whether the error names the field: as its `param` (OpenAI's shape), or in its text
    the way Anthropic's own errors do (`messages.0.content: …`; that shape has no `param`)."""
    if openai_shaped:
        return bool(error["param"]) and (
            error["param"] == field or error["param"].startswith(field + ".")
        )
    return error["message"].startswith(field.replace("[", ".").replace("]", "") + ":")


@pytest.mark.parametrize(
    ("path", "base", "schema"),
    [
        ("/v1/chat/completions", CHAT_BASE, CHAT_SCHEMA),
        ("/v1/messages", MESSAGES_BASE, MESSAGES_SCHEMA),
        ("/v1/responses", RESPONSES_BASE, RESPONSES_SCHEMA),
    ],
    ids=["chat", "messages", "responses"],
)
def test_every_field_of_the_wrong_type_is_a_400_naming_it(
    proxy: Proxy, before: Any, path: str, base: dict[str, Any], schema: Any
) -> None:
    """The base body is answered; each of its fields, and every other field the API
    documents, with a value of a JSON type it does not take, is a 400 that names it."""

    @conditions(EXAMPLES["test_every_field_of_the_wrong_type_is_a_400_naming_it"])
    @given(case=mistyped(base, schema))
    def check(case: tuple[str, dict[str, Any]]) -> None:
        field, body = case
        error = proxy.send("POST", path, auth() | {"x-session-id": "fresh"}, encode(body))
        assert error["_status"] == 400 and named(field, error, path != "/v1/messages"), (
            field,
            body,
            error,
        )

    check()


@conditions(EXAMPLES["test_preview"])
@given(
    data=st.one_of(
        # (an empty `messages` is no defect here: it previews the session as it is)
        st.tuples(
            st.sampled_from(["seed-a1", "seed-b1"]),
            bad_bytes.filter(lambda b: b != encode(valid_body([]))),
        ),
        st.tuples(bad_path_ids, st.just(b'{"model": "gpt-4o-mini"}')),
    ),
)
def test_preview(proxy: Proxy, before: Any, data: Any) -> None:
    name, body = data
    proxy.send("POST", f"/v1/sessions/{name}/preview", auth(), body)


@conditions(EXAMPLES["test_read_session"])
@given(
    name=bad_path_ids, key=st.sampled_from([KEY_A, KEY_B]), tenant=st.none() | st.text(max_size=10)
)
def test_read_session(proxy: Proxy, before: Any, name: str, key: str, tenant: str | None) -> None:
    params = f"?tenant={quote(tenant, safe='')}" if tenant else ""
    proxy.send("GET", f"/v1/sessions/{name}{params}", auth(key))


@conditions(EXAMPLES["test_delete_session"])
@given(name=bad_path_ids, key=st.sampled_from([KEY_A, KEY_B, ADMIN]))
def test_delete_session(proxy: Proxy, before: Any, name: str, key: str) -> None:
    proxy.send("DELETE", f"/v1/sessions/{name}", auth(key))


bad_queries = st.one_of(
    st.text(max_size=6)
    .filter(lambda v: not (v.isascii() and v.isdigit() and 1 <= int(v) <= 100))
    .map(lambda v: {"limit": v}),
    st.text(max_size=10)
    .filter(lambda v: not (v.partition(":")[0] and v.partition(":")[2]))
    .map(lambda v: {"after": v}),
    st.text(min_size=1, max_size=10).filter(lambda v: v != "team-a").map(lambda v: {"tenant": v}),
)


@conditions(EXAMPLES["test_list_sessions"])
@given(query=bad_queries)
def test_list_sessions(proxy: Proxy, before: Any, query: dict[str, str]) -> None:
    encoded = "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
    proxy.send("GET", f"/v1/sessions?{encoded}", auth(KEY_A))


@conditions(EXAMPLES["test_models"])
@given(authorization=hostile_auth)
def test_models(proxy: Proxy, before: Any, authorization: Any) -> None:
    proxy.send("GET", "/v1/models", {"authorization": authorization})
