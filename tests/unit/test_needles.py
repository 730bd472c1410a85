"""`proxy.conversation.needles`: the keys a body names, counted by stretches that add up to
the whole, and read by the token bound as it would count them itself."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation.needles import Needles, needles_in
from proxy.conversation.tokens import IMAGE_TOKENS, within_token_bound

pytestmark = pytest.mark.unit

_KEY = st.sampled_from(["cache_control", "image_url", "item_reference", "role", "content"])
_MESSAGE = st.dictionaries(_KEY, _KEY | st.text(max_size=6), max_size=4)


@given(st.lists(_MESSAGE, max_size=12), st.integers(0, 12))
def test_the_counts_of_stretches_split_between_messages_add_up_to_the_bodys(
    messages: list[dict[str, Any]], split: int
) -> None:
    """What lets a resent body be counted from where it is new."""
    body = orjson.dumps({"model": "m", "messages": messages})
    whole = needles_in(body)
    assert whole == Needles(
        body.count(b'"cache_control"'), body.count(b'"image_url"'), body.count(b'"item_reference"')
    )
    at = len(orjson.dumps({"model": "m", "messages": messages[:split]})) - 2  # before `]}`
    head, tail = needles_in(body, 0, at), needles_in(body, at)
    assert head is not None and tail is not None and head + tail == whole


def test_a_key_spelled_with_an_escape_leaves_the_counts_unknown() -> None:
    body = b'{"messages":[{"role":"user","content":[{"type":"image\\u005furl"}]}]}'
    assert needles_in(body) is None
    assert needles_in(body, 0, 10) == Needles(0, 0, 0)  # no escape in that stretch


def test_the_token_bound_reads_the_images_counted_as_it_counts_them() -> None:
    """An image is bounded by its flat count whether the bound counts it or is told."""
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    body = orjson.dumps({"messages": [{"role": "user", "content": [part] * 3}]})
    counted = needles_in(body)
    assert counted is not None and counted.images == 6
    for limit in (2 * len(body), 2 * len(body) + 6 * IMAGE_TOKENS, 10**7):
        assert within_token_bound(body, limit, counted.images) == within_token_bound(body, limit)
    assert not within_token_bound(body, 2 * len(body) + IMAGE_TOKENS, counted.images)
