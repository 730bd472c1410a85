"""Message identity: which messages two lists share (`proxy.conversation.identity`)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation.identity import same_messages, shared_messages


@given(
    st.integers(0, 40),
    st.lists(st.sampled_from(["same", "equal", "other"]), max_size=40),
    st.integers(0, 5),
)
def test_messages_are_shared_as_far_as_the_first_that_differs(
    length: int, later: list[str], extra: int
) -> None:
    """`shared_messages` (found by halves) counts what a loop counts: the first message the
    very same object, then equal ones, up to the shorter list's end; `same_messages`
    says whether the whole lists are so."""
    messages = [{"role": "user", "content": f"m{n}"} for n in range(length + len(later))]
    other: list[Any] = messages[:length]
    for n, how in enumerate(later, length):
        made = {"same": messages[n], "equal": dict(messages[n]), "other": {"role": "x"}}
        other.append(made[how])
    other += [{"role": "user", "content": "more"}] * extra
    expected = 0
    for a, b in zip(messages, other, strict=False):
        if a is not b and (expected == 0 or a != b):
            break
        expected += 1
    assert shared_messages(messages, other) == expected == shared_messages(other, messages)
    whole = len(messages) == len(other) and expected == len(messages)
    assert same_messages(messages, other) == (whole and (not other or other[-1] is messages[-1]))
