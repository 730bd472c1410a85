from __future__ import annotations

import pytest

from proxy.conversation.identity import (
    GENESIS,
    canonical,
    chain,
    chain_hash,
    message_hash,
    split_system,
)


def user(content: object, **extra: object) -> dict:
    return {"role": "user", "content": content, **extra}


def tool_turn(arguments: str, **call_extra: object) -> dict:
    function = {"name": "f", "arguments": arguments}
    call = {"id": "call_1", "type": "function", "function": function, **call_extra}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def text(value: str) -> dict:
    return {"type": "text", "text": value}


ECHOED_TOOL_TURN = {
    "role": "assistant",
    "tool_calls": [
        {"id": "call_1", "index": 0, "function": {"name": "f", "arguments": '{"a": 1}', "x": 1}}
    ],
}
ASSISTANT_OK = {"role": "assistant", "content": "ok"}


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (user("hi"), user([text("hi")])),
        (user("hello world"), user([text("hello "), text("world")])),
        ({"role": "assistant", "content": None, "tool_calls": []}, {"role": "assistant"}),
        ({"role": "assistant", "content": ""}, {"role": "assistant"}),
        (ASSISTANT_OK, {**ASSISTANT_OK, "refusal": None, "annotations": [], "audio": None}),
        (user("x", name=""), user("x")),
        (tool_turn('{"a":1}'), ECHOED_TOOL_TURN),
    ],
    ids=[
        "text-parts",
        "joined-parts",
        "null-vs-missing",
        "empty-string",
        "extra-fields",
        "empty-name",
        "tool-call-shape",
    ],
)
def test_equivalent_shapes_hash_the_same(left: dict, right: dict) -> None:
    assert message_hash(left) == message_hash(right)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (user("hi"), user("hi!")),
        (user("hi"), {"role": "assistant", "content": "hi"}),
        (user("hi", name="a"), user("hi")),
        (tool_turn('{"a":1}'), tool_turn('{"a":2}')),
        (tool_turn("{}"), tool_turn("{}", id="call_2")),
        (
            {"role": "tool", "tool_call_id": "call_1", "content": "r"},
            {"role": "tool", "tool_call_id": "call_2", "content": "r"},
        ),
        (
            user([{"type": "image_url", "image_url": {"url": "a.png"}}]),
            user([{"type": "image_url", "image_url": {"url": "b.png"}}]),
        ),
        (user([text("a"), text("b")]), user([text("b"), text("a")])),
    ],
    ids=[
        "content",
        "role",
        "name",
        "tool-args",
        "tool-call-id",
        "tool-result-id",
        "image",
        "part-order",
    ],
)
def test_different_messages_hash_differently(left: dict, right: dict) -> None:
    assert message_hash(left) != message_hash(right)


def test_canonical_keeps_non_text_parts_and_does_not_touch_input() -> None:
    message = {
        "role": "user",
        "content": [
            {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
            {"type": "image_url", "image_url": {"url": "a.png"}},
        ],
        "refusal": None,
    }
    before = repr(message)
    assert canonical(message) == {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "a.png"}},
        ],
    }
    assert repr(message) == before


def test_hash_is_fixed_width_hex() -> None:
    digest = message_hash({"role": "user", "content": "é"})
    assert len(digest) == 32
    int(digest, 16)


def test_chain_is_order_sensitive_and_running() -> None:
    a, b = message_hash(user("a")), message_hash(user("b"))
    assert chain([a, b]) != chain([b, a])
    assert chain([a, b])[-1] != chain([b, a])[-1]
    assert chain([a, b])[-1] != chain([b, b])[-1]  # the head pins the whole prefix
    assert chain([a, b]) == [chain_hash(GENESIS, a), chain_hash(chain_hash(GENESIS, a), b)]
    assert chain([b], start=chain([a])[-1]) == chain([a, b])[1:]
    assert chain([]) == []


def test_split_system_takes_only_leading_system_and_developer() -> None:
    system = [{"role": "system", "content": "s"}, {"role": "developer", "content": "d"}]
    rest = [{"role": "user", "content": "u"}, {"role": "system", "content": "late"}]
    assert split_system(system + rest) == (system, rest)
    assert split_system(rest) == ([], rest)
    assert split_system([]) == ([], [])
