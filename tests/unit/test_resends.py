"""`Resends`: a resent conversation parsed from where it is new is the body parsed whole."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.conversation.needles import needles_in
from proxy.engine.planner.caching import marks_in
from proxy.http.resends import FEWEST_KEPT_MESSAGES, KEPT_SEEN_BYTES, Resends

pytestmark = pytest.mark.unit

N = FEWEST_KEPT_MESSAGES + 4


def conversation(count: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    texts = ["plain", 'quote " and \\ slash', "ünïcödé ✓", "tab\tnew\nline", "[x]", "{,:}"]
    return [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"{n} {rng.choice(texts)}"}
        for n in range(count)
    ]


def body(messages: list[Any], name: str = "messages", **params: Any) -> bytes:
    return orjson.dumps({"model": "m", **params, name: messages, "stream": False})


def kept(messages: list[Any], name: str = "messages", **params: Any) -> tuple[Resends, bytes]:
    """A `Resends` holding the body of `messages` parsed (sent, then resent), and it."""
    resends, raw = Resends(), body(messages, name, **params)
    for _ in range(2):
        resends.parse(raw, "k", name)
    assert resends._known["k"][0].messages is not None
    return resends, raw


def test_a_resent_conversation_is_parsed_from_where_it_is_new() -> None:
    resends = Resends()
    messages = conversation(N)
    first = resends.parse(body(messages), "k", "messages")
    assert first.data == orjson.loads(body(messages))
    assert not resends._known and resends._seen["k"].messages is None  # its bytes only
    previous = first
    for turn in range(3):
        messages += [{"role": "assistant", "content": f"reply {turn}"}]
        messages += [{"role": "user", "content": f"more {turn}"}]
        again = resends.parse(body(messages), "k", "messages")
        assert again.data == orjson.loads(body(messages))
        kept = resends._known["k"][0].messages
        assert kept is not None and kept == messages  # resent: kept parsed
        if turn:  # the kept messages are the same objects: parsed once
            assert again.data["messages"][0] is previous.data["messages"][0]
            assert again.data["messages"] is not previous.data["messages"]
        # The conversation array's bytes, as orjson writes them, are a view of the body.
        assert again.messages_json is not None
        assert bytes(again.messages_json) == orjson.dumps(messages)
        previous = again


def test_a_short_conversation_or_another_caller_is_parsed_whole() -> None:
    resends = Resends()
    short = conversation(FEWEST_KEPT_MESSAGES - 1)
    resends.parse(body(short), "k", "messages")
    assert not resends._known and not resends._seen
    messages = conversation(N)
    for _ in range(3):
        resends.parse(body(messages), "tenant a", "messages")
    longer = body([*messages, {"role": "user", "content": "x"}])
    other = resends.parse(longer, "tenant b", "messages")
    kept = resends._known["tenant a"][0].messages
    assert kept is not None and other.data["messages"][0] is not kept[0]


def test_an_edit_of_a_kept_message_is_parsed_whole() -> None:
    resends = Resends()
    messages = conversation(N)
    resends.parse(body(messages), "k", "messages")
    first = resends.parse(body(messages), "k", "messages")
    edited = [dict(m) for m in messages]
    edited[3]["content"] = "edited"
    again = resends.parse(body(edited), "k", "messages")
    assert again.data == orjson.loads(body(edited))
    assert again.data["messages"][0] is not first.data["messages"][0]


def test_bodies_not_written_as_orjson_writes_them_are_parsed_whole_and_exactly() -> None:
    resends = Resends()
    messages = conversation(N)
    for dumps in (json.dumps, lambda data: json.dumps(data, indent=1, ensure_ascii=False)):
        for more in range(3):
            text = dumps({"model": "m", "messages": messages + conversation(more, seed=more)})
            raw = text.encode()
            assert resends.parse(raw, "k", "messages").data == orjson.loads(raw)
    assert all(not entries for entries in resends._known.values())


def test_the_conversations_key_again_after_the_kept_messages_is_parsed_whole() -> None:
    """A duplicate key: the last one wins, as a whole parse has it."""
    resends, raw = kept(conversation(N))
    again = raw[:-1] + b',"messages":[0]}'
    assert (
        resends.parse(again, "k", "messages").data
        == orjson.loads(again)
        == {
            "model": "m",
            "messages": [0],
            "stream": False,
        }
    )


def test_a_key_named_like_the_conversation_inside_an_earlier_parameter() -> None:
    """The first `"messages": [` is not the conversation's: not kept, parsed whole."""
    resends, messages = Resends(), conversation(N)
    raw = body(messages, metadata={"messages": messages})
    for _ in range(2):
        assert resends.parse(raw, "k", "messages").data == orjson.loads(raw)
    assert not resends._known and not resends._seen
    longer = body([*messages, {"role": "user", "content": "x"}], metadata={"messages": messages})
    assert resends.parse(longer, "k", "messages").data == orjson.loads(longer)


def test_a_resent_body_that_is_not_json_raises_as_a_whole_parse_does() -> None:
    resends, raw = kept(conversation(N))
    broken = raw[:-1] + b',"messages_x":'
    with pytest.raises(orjson.JSONDecodeError):
        resends.parse(broken, "k", "messages")


def test_responses_input_is_its_conversation() -> None:
    resends = Resends()
    items = conversation(N)
    resends.parse(body(items, "input"), "k", "input")
    resends.parse(body(items, "input"), "k", "input")
    more = [*items, {"role": "user", "content": "x"}]
    again = resends.parse(body(more, "input"), "k", "input")
    assert again.data == orjson.loads(body(more, "input"))
    kept = resends._known["k"][0].messages
    assert kept is not None and again.data["input"][0] is kept[0]


def test_what_is_kept_is_bounded_by_its_weight() -> None:
    resends = Resends(kept_weight=1 << 20)
    for number in range(40):
        for _ in range(2):  # kept parsed once resent
            resends.parse(body(conversation(N, seed=number) * 20), f"k{number}", "messages")
    assert resends._weight == sum(k.weight for e in resends._known.values() for k in e)
    assert resends._weight <= (1 << 20) + max(k.weight for e in resends._known.values() for k in e)
    assert 1 <= len(resends._known) < 40


# Keys and strings that are sometimes the needles (`proxy.conversation.needles`).
_NEEDLE = st.sampled_from(["cache_control", "image_url", "item_reference"])
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8) | _NEEDLE,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=4) | _NEEDLE, inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(_JSON, min_size=FEWEST_KEPT_MESSAGES, max_size=FEWEST_KEPT_MESSAGES + 6),
    st.lists(_JSON, max_size=4),
    st.lists(st.tuples(st.integers(0, 40), _JSON), max_size=2),
    st.dictionaries(st.sampled_from(["model", "tools", "stream", "x"]), _JSON, max_size=3),
)
def test_any_resend_parses_to_what_a_whole_parse_gives(
    messages: list[Any], more: list[Any], edits: list[tuple[int, Any]], params: dict[str, Any]
) -> None:
    """Any conversation resent longer, edited or with other parameters after it: the same
    data as `orjson.loads`, every time, and where its needles (cache marks, images, item
    references) were counted from where it is new, the counts of the whole body."""
    resends = Resends()
    first = orjson.dumps({**params, "messages": messages})
    for _ in range(2):  # seen once, then resent: kept parsed
        parsed = resends.parse(first, "k", "messages")
        assert parsed.data == orjson.loads(first)
        assert parsed.needles in (None, needles_in(first))
    resent = list(messages) + more
    for at, value in edits:
        resent[at % len(resent)] = value
    for after in ({}, params, {"stream": True}):
        raw = orjson.dumps({**params, "messages": resent, **after})
        parsed = resends.parse(raw, "k", "messages")
        assert parsed.data == orjson.loads(raw)
        assert parsed.needles in (None, needles_in(raw))


def test_a_body_seen_once_is_kept_as_its_bytes_only_the_latest_of_each_key() -> None:
    """One-off bodies (a hostile client's megabyte arrays) hold no parsed messages: only
    the latest of each key waits to be resent, within `KEPT_SEEN_BYTES` in all."""
    resends = Resends()
    for number in range(5):
        resends.parse(body(conversation(N, seed=number) * 50), "k", "messages")
    assert not resends._known and len(resends._seen) == 1
    for number in range(200):
        resends.parse(body(conversation(N, seed=number) * 50), f"k{number}", "messages")
    assert not resends._known
    sizes = [len(seen.body) for seen in resends._seen.values()]
    assert resends._seen_bytes == sum(sizes) <= KEPT_SEEN_BYTES + max(sizes)
    assert 1 < len(resends._seen) < 200


def test_a_resend_that_moves_its_cache_mark_to_its_new_message_is_parsed_from_there() -> None:
    """Claude Code marks its last message for the cache, and the next turn marks the new
    one instead: the message marked before differs when resent, the ones before it not;
    the marks are counted from there (one, each turn), and where a message spells
    `cache_control` with an escape, left to a whole count."""
    resends = Resends()
    messages = conversation(N)

    def marked(conversation: list[dict[str, Any]]) -> bytes:
        last = conversation[-1] | {"cache_control": {"type": "ephemeral"}}
        return body([*conversation[:-1], last])

    before = resends.parse(marked(messages), "k", "messages")
    for turn in range(4):
        messages += [{"role": "assistant", "content": f"reply {turn}"}]
        messages += [{"role": "user", "content": f"more {turn}"}]
        raw = marked(messages)
        parsed = resends.parse(raw, "k", "messages")
        assert parsed.data == orjson.loads(raw)
        assert parsed.needles is not None and parsed.needles.marks == marks_in(raw) == 1
        if turn:  # kept parsed since the first resend: the same objects up to the mark
            assert parsed.data["messages"][0] is before.data["messages"][0]
            assert parsed.data["messages"][-3] is not before.data["messages"][-1]
        before = parsed
    messages += [{"role": "user", "content": [{"type": "text", "text": "x"}]}]
    raw = marked(messages).replace(b'"cache_control"', b'"cache\\u005fcontrol"')
    assert resends.parse(raw, "k", "messages").needles is None


def test_a_body_parsed_while_another_thread_parses_one_is_parsed_whole() -> None:
    """A long body is parsed in a worker thread; one that arrives meanwhile is parsed
    whole (the event loop never waits for another thread's parse) and nothing is kept
    of it; the next one resumes from what was kept."""
    resends, _ = kept(conversation(N))
    longer = body([*conversation(N), {"role": "user", "content": "more"}])
    with resends._lock:
        parsed = resends.parse(longer, "k", "messages")
    assert parsed.data == orjson.loads(longer) and parsed.messages_json is None
    again = resends.parse(longer, "k", "messages")
    assert again.data == orjson.loads(longer) and again.messages_json is not None
