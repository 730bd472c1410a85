"""Messages validated as OpenAI validates them, each error naming the field, and the
byte bound a conversation without a session is planned by."""

from __future__ import annotations

import functools
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import validation
from proxy.conversation.tokens import token_bound, within_token_bound
from proxy.conversation.validation import Validated, validate_messages
from proxy.errors import InvalidRequest

pytestmark = pytest.mark.unit

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
GOOD: list[Any] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "ann"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "42"},
    {"role": "assistant", "content": "done", "name": None},
]


def test_a_well_formed_conversation_passes() -> None:
    validate_messages(GOOD)


@pytest.mark.parametrize(
    ("bad", "param"),
    [
        ("hello", "messages[5]"),
        ({"role": "wizard", "content": "x"}, "messages[5].role"),
        ({"role": ["user"], "content": "x"}, "messages[5].role"),
        ({"role": "user", "content": 7}, "messages[5].content"),
        ({"role": "user"}, "messages[5].content"),
        ({"role": "user", "content": "x", "name": 3}, "messages[5].name"),
        ({"role": "user", "content": [{"text": "x"}]}, "messages[5].content[0]"),
        ({"role": "user", "content": [{"type": "text"}]}, "messages[5].content[0].text"),
        ({"role": "assistant", "content": None, "tool_calls": {}}, "messages[5].tool_calls"),
        ({"role": "assistant", "content": None, "tool_calls": [{}]}, "messages[5].tool_calls[0]"),
        (
            {"role": "assistant", "content": None, "tool_calls": [CALL, CALL]},
            "messages[5].tool_calls[1].id",
        ),
        ({"role": "tool", "content": "x"}, "messages[5].tool_call_id"),
        ({"role": "tool", "tool_call_id": "c9", "content": "x"}, "messages[5].tool_call_id"),
    ],
)
def test_each_malformed_message_is_a_400_naming_its_field(bad: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        validate_messages([*GOOD, bad])
    assert raised.value.param == param
    assert raised.value.code == "invalid_value"


def test_the_param_counts_from_the_requests_own_list() -> None:
    with pytest.raises(InvalidRequest) as raised:
        validate_messages([{"role": "user", "content": 1}], offset=3)
    assert raised.value.param == "messages[3].content"


def test_a_result_at_the_start_of_a_continuation_may_answer_a_stored_call() -> None:
    result = {"role": "tool", "tool_call_id": "stored", "content": "x"}
    validate_messages([result], continues=True)
    with pytest.raises(InvalidRequest):
        validate_messages([result])


_PIECES = st.sampled_from(["a", "b", ",", ":", '"', "{", "]", " ", "é", '"image_url"'])
_TEXT = st.lists(_PIECES, max_size=100).map("".join)


@given(_TEXT, st.integers(min_value=0, max_value=40_000))
def test_the_bound_is_checked_as_the_exact_bound_would_check_it(text: str, limit: int) -> None:
    data = orjson.dumps([{"role": "user", "content": text}]) + text.encode()
    assert within_token_bound(data, limit) == (token_bound(data) <= limit)


BAD: list[Any] = [
    {"role": "robot", "content": "hi"},
    {"role": "user", "content": 3},
    {"role": "tool", "tool_call_id": "nobody's", "content": "x"},
    {"role": "user", "content": [{"type": 1}]},
]


def _verdict(check: Any) -> str | None:
    try:
        check()
    except InvalidRequest as error:
        return str(error)
    return None


@given(st.lists(st.tuples(st.integers(0, 8), st.booleans(), st.integers(0, 3)), max_size=25))
def test_a_conversation_held_as_validated_is_judged_as_validating_it_afresh(
    steps: list[tuple[int, bool, int]],
) -> None:
    """However a client resends its conversation (longer, cut, with a message replaced by
    a good or a bad one), `Validated` says what validating it afresh says, error and all:
    holding the messages of what passed never passes what does not."""
    held = Validated(kept=30)
    conversation: list[Any] = [GOOD[1]]
    for at, good, which in steps:
        if good:
            message = dict(GOOD[1 + which % 4]) if at % 3 else {"role": "user", "content": "q"}
        else:
            message = BAD[which]
        where = min(at, len(conversation))
        conversation = [*conversation[:where], message, *conversation[where:]][:12]
        expected = _verdict(functools.partial(validate_messages, conversation, offset=1))
        assert _verdict(functools.partial(held.validate, conversation, 1, 100)) == expected
        if expected is not None:  # the client fixes it: the bad message goes
            conversation = [m for m in conversation if m is not message]


def test_a_resent_conversation_is_validated_from_where_it_is_new(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The very objects validated before are not validated again; a conversation of other
    objects (another client's parse) is validated whole; what is held is bounded, and a
    conversation larger than the bound is not held."""
    starts: list[int] = []

    def recording(messages: list[Any], start: int = 0, offset: int = 0) -> None:
        starts.append(start)
        validate_messages(messages, start, offset)

    monkeypatch.setattr(validation, "validate_messages", recording)
    held = Validated(kept=10)
    conversation = [dict(m) for m in GOOD[1:]]
    held.validate(conversation)
    held.validate([*conversation, {"role": "user", "content": "more"}])
    held.validate(orjson.loads(orjson.dumps(conversation)))  # the same, parsed again
    assert starts == [0, 4, 0]
    for n in range(5):
        held.validate([{"role": "user", "content": f"other {n}"}] * 4)
    assert held._held <= 10
    held.validate([*conversation, {"role": "user", "content": "more"}])
    assert starts[-1] == 0  # dropped to make room: validated whole
    large = [{"role": "user", "content": f"{n}"} for n in range(11)]
    held.validate(large)
    held.validate(large)
    assert starts[-2:] == [0, 0] and held._held <= 10
