"""Which of a request's parameters reach the provider (`proxy.doors.parameters`): what a
door could not carry is said; of each group of alternatives the first the model takes is
sent and the rest removed; a model that takes none has them all removed and said, or,
with `drop_params` false, refused with a 400 naming the first."""

from __future__ import annotations

import pytest

from proxy.doors.anthropic.native import MessagesNative
from proxy.doors.base import Inbound
from proxy.doors.parameters import Supports, field_label, not_sent
from proxy.errors import InvalidRequest


def takes(*names: str) -> Supports:
    """A model that takes only `names`."""
    return lambda model, parameter: parameter in names


def test_of_a_group_the_first_taken_is_sent_and_the_rest_removed() -> None:
    body = {"model": "m", "messages": [], "thinking": {}, "reasoning_effort": "low"}
    inbound = Inbound(body, dropped=("vendor",), optional=(("thinking", "reasoning_effort"),))
    assert not_sent(inbound, None, takes("reasoning_effort"), refuse=False) == ["vendor"]
    assert "thinking" not in body and body["reasoning_effort"] == "low"


def test_a_group_the_model_takes_none_of_is_removed_and_said_then_the_unsent_headers() -> None:
    body = {"model": "m", "messages": [], "top_k": 3}
    inbound = Inbound(body, optional=(("top_k",), ("absent",)))
    assert not_sent(inbound, None, takes(), refuse=False, unsent=["h"]) == ["top_k", "h"]
    assert "top_k" not in body


def test_with_drop_params_false_a_parameter_not_taken_is_refused() -> None:
    inbound = Inbound({"model": "m", "messages": [], "top_k": 3}, optional=(("top_k",),))
    with pytest.raises(InvalidRequest) as raised:
        not_sent(inbound, None, takes(), refuse=True)
    assert raised.value.param == "top_k"


def test_in_the_doors_own_api_its_optional_fields_decide_and_the_chat_groups_do_not() -> None:
    native = MessagesNative({"model": "m", "speed": "fast"})
    body = {"model": "m", "messages": [], "top_k": 3}
    inbound = Inbound(body, dropped=("chat only",), optional=(("top_k",),), native_dropped=("own",))
    assert not_sent(inbound, native, takes(), refuse=False) == ["own", "speed"]
    assert body["top_k"] == 3  # the chat body is not what is sent
    assert native.drop("speed") is False  # left out of the native request


def test_a_dropped_fields_label_is_bounded() -> None:
    assert [field_label(n) for n in ("tools.web", "output_config.x", "top_k", "zz")] == [
        "tools",
        "output_config",
        "top_k",
        "other",
    ]
