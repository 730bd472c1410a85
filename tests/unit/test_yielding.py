"""The window's older part yields its room to recall when the newest message asks about
what is further back (`proxy.engine.yielding`), and stays when it asks about what was
just said."""

from __future__ import annotations

from typing import Any

from proxy.conversation.tokens import TokenCounter
from proxy.engine.planner.window import Plan, yielded_message
from proxy.engine.yielding import Window, older_part, serves_better
from proxy.recall.index import RECALL_PREFIX, Hit


def said(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def echo(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": f"echo: {text}"}


def hits(*starts: int) -> list[Hit]:
    return [Hit(start, start + 1, 1.0, ()) for start in starts]


def test_the_older_part_is_what_a_block_could_use_and_leaves_the_tail() -> None:
    """As many of the window's oldest messages as a block could use beyond its room,
    cut where a user message begins, and never the newest 15% of the budget."""
    counter = TokenCounter("chars", lambda text: len(text))
    summary = {"role": "system", "content": "x" * 96}
    window = [said("a" * 96), echo("b" * 90)] * 5  # a turn: 103 + 108 tokens
    messages = [summary, *window, said("?" * 96)]
    plan = Plan(messages, counter.count_messages(messages), "summary", None, 0)

    def part(room: int, cap: int) -> tuple[int | None, int]:
        frame = Window(plan, 1, 0, budget=1600, system=0, fixed=0, room=room, cap=cap)
        return older_part(frame, len(messages) - 1, counter)

    assert part(room=100, cap=550) == (5, 422)  # 450 more: two turns, cut where one begins
    assert part(room=100, cap=10_000) == (9, 844)  # 15% of 1,600 and more is left
    assert part(room=500, cap=500) == (None, 0)  # the block can take no more


def test_the_older_part_yields_to_units_that_rank_above_it() -> None:
    order = hits(1, 2, 3, 4, 5, 90)  # 90 is the older part's only ranked unit, last
    # The block in its room adds 4 and 5 (ranks 3, 4); it leaves 90 and 91 out (5, unranked).
    assert serves_better(order, [1, 2, 3, 4, 5], kept=[1, 2, 3], older=[90, 91])
    # A follow-up: the older part ranks first; units that rank below it do not replace it.
    order = hits(90, 91, 1, 2, 3, 4, 5)
    assert not serves_better(order, [1, 2, 3, 4, 5], kept=[1, 2, 3], older=[90, 91])
    assert not serves_better(order, [1, 2, 3], kept=[1, 2, 3], older=[90, 91])  # adds none


async def _asked(make_parts: Any, question: str) -> list[dict[str, Any]]:
    parts = make_parts(window=3000)
    history: list[dict[str, Any]] = []
    for number in range(30):
        note = f"Kayak log {number}: paddled past marker {number * 7} near the north cove."
        history += [said(note), echo(note)]
    for number in range(40):
        chat = f"Recipe step {number}: fold {number} grams of flour into the sourdough starter."
        history += [said(chat), echo(chat)]
    for end in range(2, len(history) + 1, 2):
        await parts.turn(history[: end - 1])
    turn = await parts.turn([*history, said(question)])
    assert turn.tokens_sent is not None and turn.tokens_sent <= 2400  # 80% of the window
    return list(parts.upstream.sent[-1]["messages"])


async def test_a_question_about_the_past_gets_the_older_parts_room(make_parts: Any) -> None:
    """Issue 52: the window's older part (recipe steps) yields to what the question asks
    about (the kayak log, long summarized): a marker says what is left out, the block
    takes its room, and the newest turns stay verbatim just before the question."""
    sent = await _asked(make_parts, "What did the kayak log say about the north cove markers?")
    [marker] = [m for m in sent if "not shown here" in str(m["content"])]
    count = int(str(marker["content"]).split()[1])
    assert marker == yielded_message(count) and count >= 2
    [block] = [m for m in sent if str(m["content"]).startswith(RECALL_PREFIX)]
    assert str(block["content"]).count("Kayak log") > 10
    assert sent[-2] == block and sent[-1]["content"].startswith("What did the kayak")
    assert sent[-3] == echo("Recipe step 39: fold 39 grams of flour into the sourdough starter.")


async def test_a_follow_up_on_what_was_just_said_keeps_the_window(make_parts: Any) -> None:
    sent = await _asked(make_parts, "How many grams of flour went into the sourdough starter?")
    assert not [m for m in sent if "not shown here" in str(m["content"])]
    steps = [m for m in sent if m["role"] == "user" and "Recipe step" in str(m["content"])]
    assert len(steps) > 10  # the recipe steps are sent as they were said
