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


async def test_a_conversation_is_sent_whole_until_it_nears_the_budget_then_folds_by_cost(
    make_parts: Any,
) -> None:
    """On a 32k model (a 25,600-token budget) whose recall block (8,192 tokens at most)
    cannot fill the room: the conversation goes whole until it passes `summarize_at`;
    from its first fold on, a fold comes when the prompt reaches the size that costs
    least at its pace, well before that, each keeping about a tenth of the room (a fold
    at `summarize_at` keeps half of its room)."""
    parts = make_parts(window=32_000)
    parts.upstream.reply = lambda body: "Noted."
    history: list[Message] = []
    folds: list[int] = []  # the prompt sent by the turn after which each fold was made
    kept: list[int] = []  # the verbatim window sent by the turn after each
    checkpoints, folded = 0, False
    for n in range(60):
        words = " ".join(f"w{n}x{k}" for k in range(300))
        history.append({"role": "user", "content": f"Note {n}: {words}."})
        turn = await parts.turn(history)
        history.append({"role": "assistant", "content": "Noted."})
        if folded:  # made ahead after the turn before: this one sends it
            messages = parts.upstream.sent[-1]["messages"]
            kept.append(COUNTER.count_messages([m for m in messages if m["role"] != "system"]))
        meta = await parts.store.load("t1", "s")
        assert meta is not None
        folded = meta.checkpoints > checkpoints
        if folded:
            folds.append(turn.tokens_sent)
            checkpoints = meta.checkpoints
    room = 25_600
    assert len(folds) >= 4 and len(kept) >= 3
    assert folds[0] > 0.6 * room  # the first: near `summarize_at`
    assert max(folds[1:]) < folds[0] - 1_000  # then where the cycle ends
    assert all(window < 0.15 * room for window in kept[1:])  # the new turn beside a tenth
