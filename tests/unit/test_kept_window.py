"""What a fold keeps verbatim: the share of the room that costs least until the next fold
(`proxy.engine.planner.payoff.kept_share`), unless `context.keep_recent_ratio` sets it."""

from __future__ import annotations

from typing import Any

from proxy.conversation.identity import Message
from proxy.conversation.tokens import counter_for_model
from tests.unit.engines import MODEL, Parts

COUNTER = counter_for_model(MODEL)
WINDOW = 16_384  # a budget of 13,107 tokens; gpt-4o-mini reads its cache at half price


def chat(turns: int) -> list[Message]:
    """A chat app's conversation: short questions, answers of a few lines, each distinct."""
    history: list[Message] = []
    for n in range(turns):
        words = " ".join(f"w{n}x{k}" for k in range(40))
        history.append({"role": "user", "content": f"Question {n} about {words}?"})
        history.append({"role": "assistant", "content": f"Answer {n}: {words} {words}."})
    return history


async def kept(parts: Parts) -> int:
    """Tokens of the conversation sent verbatim by the turn that folds (the summary and a
    recall block are system messages beside it)."""
    history = chat(150)
    turn = await parts.turn([*history, {"role": "user", "content": "And the first question?"}])
    assert turn.compression == "summary"
    sent = parts.upstream.sent[-1]["messages"]
    return COUNTER.count_messages([m for m in sent if m["role"] != "system"])


async def test_a_chat_whose_recall_fills_the_room_keeps_more_of_its_window(
    make_parts: Any,
) -> None:
    """The recall block fills what the window leaves, and the next question writes it
    anew: a token kept verbatim is read from the cache at half that. Without recall
    nothing fills the room, and the smallest window is cheapest."""
    room = 13_107
    recalling = await kept(make_parts(window=WINDOW))
    alone = await kept(make_parts(window=WINDOW, context={"recall_ratio": 0}))
    assert recalling > room / 4
    assert alone <= room / 10
    assert recalling > 3 * alone


async def test_a_set_share_is_kept_as_set(make_parts: Any) -> None:
    room = 13_107
    window = await kept(make_parts(window=WINDOW, context={"keep_recent_ratio": 0.3}))
    assert 0.2 * room < window <= 0.3 * room
