"""A turn through the engine in this process (`tests/unit/engines.py`): what it sends,
what it stores and what it answers, on a real disk store, with the upstream's call
scripted."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.http.headers import COMPRESSION, turn_headers
from proxy.recall.index import RECALL_PREFIX
from proxy.sessions.records import Commit
from tests.unit.engines import SUMMARY, Parts, conversation, is_summarizer

SYSTEM = {"role": "system", "content": "You are a careful assistant."}


def said(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def echo(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": f"echo: {text}"}


def committed(parts: Parts) -> list[int]:
    """How many messages each commit of the store was given, as the engine commits."""
    counts: list[int] = []
    commit = parts.store.commit

    async def counted(change: Commit) -> bool:
        counts.append(len(change.appended))
        return await commit(change)

    parts.store.commit = counted  # type: ignore[method-assign]
    return counts


async def test_a_full_resend_turn_stores_only_its_new_messages(parts: Parts) -> None:
    counts = committed(parts)
    await parts.turn([SYSTEM, said("one")])
    turn = await parts.turn([SYSTEM, said("one"), echo("one"), said("two")])
    assert parts.upstream.sent[-1]["messages"] == [SYSTEM, said("one"), echo("one"), said("two")]
    assert await parts.stored() == [said("one"), echo("one"), said("two"), echo("two")]
    assert counts == [2, 2]  # each turn: its new message and the reply
    assert (turn.compression, turn.tokens_sent) == ("none", turn.tokens_original)


async def test_an_append_turn_is_sent_with_the_stored_history(parts: Parts) -> None:
    await parts.turn([said("one")], mode="append")
    await parts.turn([said("two")], mode="append")
    assert parts.upstream.sent[-1]["messages"] == [said("one"), echo("one"), said("two")]
    assert await parts.stored() == [said("one"), echo("one"), said("two"), echo("two")]


async def test_sessions_are_kept_apart_by_tenant_and_id(parts: Parts) -> None:
    await parts.turn([said("ours")], session="s", tenant="a")
    await parts.turn([said("theirs")], session="s", tenant="b")
    await parts.turn([said("other")], session="t", tenant="a")
    assert await parts.stored("s", "a") == [said("ours"), echo("ours")]
    assert await parts.stored("s", "b") == [said("theirs"), echo("theirs")]
    assert await parts.stored("t", "a") == [said("other"), echo("other")]


async def test_a_request_without_a_session_is_answered_and_stores_nothing(parts: Parts) -> None:
    turn = await parts.turn([said("hello")], session=None)
    assert parts.upstream.sent[-1]["messages"] == [said("hello")]
    assert turn.key is None
    assert await parts.store.sessions(None, None, 10) == []


async def test_a_long_session_is_sent_as_a_summary_and_its_latest_turns(
    make_parts: Any,
) -> None:
    parts = make_parts(window=1000)  # a budget of 800 tokens
    history = conversation(4)
    turn = await parts.turn([*history, said("and now?")])
    sent = parts.upstream.sent[-1]["messages"]
    assert turn.compression == "summary" and turn_headers(turn)[COMPRESSION] == "summary"
    assert turn.tokens_sent is not None and turn.tokens_sent <= 800 < turn.tokens_original
    assert sent[0]["content"].startswith("Summary of the earlier conversation")
    assert SUMMARY in sent[0]["content"]
    asked = [*history, said("and now?")]
    assert sent[1:] == asked[len(asked) - len(sent) + 1 :]  # then the latest, verbatim
    assert len(await parts.stored()) == 10  # and the whole conversation is kept


async def test_a_summary_that_fails_falls_back_to_truncation_and_says_so(
    make_parts: Any,
) -> None:
    parts = make_parts(window=1000)
    parts.upstream.summarizer_down = True
    history = conversation(4)
    turn = await parts.turn([*history, said("and now?")])
    assert parts.upstream.summaries  # it was asked
    assert turn.compression == "truncated"
    assert turn_headers(turn)[COMPRESSION] == "truncated"
    assert turn.tokens_sent is not None and turn.tokens_sent <= 800
    sent = parts.upstream.sent[-1]["messages"]
    assert sent[-1] == said("and now?") and not any(SUMMARY in str(m) for m in sent)
    assert await parts.store.checkpoints("t1", "s") == []
    assert len(await parts.stored()) == 10  # the turn itself is stored whole


async def test_a_summarizer_that_keeps_failing_is_left_alone_until_its_back_off_is_over(
    make_parts: Any,
) -> None:
    """The breaker, on the engine's own clock: after three failures no turn asks the
    summarizer until the back-off (5 s by default) has passed on that clock."""
    parts = make_parts(window=1000)
    parts.upstream.summarizer_down = True
    history = conversation(3)
    for number in range(8):
        history.append(said(f"turn {number} " + "word " * 150))
        turn = await parts.turn(list(history))
        history.append(echo(history[-1]["content"]))
        assert turn.compression == "truncated"
    asked = len(parts.upstream.summaries)
    assert 3 <= asked < 8
    parts.upstream.summarizer_down = False
    history.append(said("still away?"))
    await parts.turn(list(history))
    history.append(echo("still away?"))
    assert len(parts.upstream.summaries) == asked  # open: not even tried
    parts.clock.advance(5.0)
    history.append(said("back now?"))
    turn = await parts.turn(list(history))
    assert len(parts.upstream.summaries) > asked
    assert turn.compression == "summary"


async def test_an_edit_forks_the_session_and_keeps_the_summaries_before_it(
    make_parts: Any,
) -> None:
    parts = make_parts(window=1000)
    history = conversation(4)
    for end in range(2, len(history) + 1, 2):  # turn by turn, as a client sends them
        await parts.turn(history[: end - 1])
    before = await parts.store.checkpoints("t1", "s")
    assert [c.covers_until for c in before] == [2, 4, 6]
    edited = {"role": "user", "content": "an edited third question"}
    await parts.turn([*history[:4], edited])
    assert await parts.stored() == [*history[:4], edited, echo("an edited third question")]
    after = await parts.store.checkpoints("t1", "s")
    assert after[:2] == before[:2]  # what the edit left alone keeps its summaries
    assert before[2] not in after  # the summary of what the edit cut away is gone


async def test_a_preview_writes_nothing_and_calls_no_model(make_parts: Any) -> None:
    parts = make_parts(window=1000)
    history = conversation(2)
    await parts.turn(history[:1])
    await parts.turn(history[:3])
    meta = await parts.store.load("t1", "s")
    plans = await parts.store.plans("t1", "s")
    summaries, sent = len(parts.upstream.summaries), len(parts.upstream.sent)
    preview = await parts.preview([*conversation(4), said("and now?")])
    assert preview["summary_due"] is not None  # a summary would be made first
    assert preview["compression"] == "truncated"  # what is shown meanwhile
    assert preview["tokens_sent"] <= preview["budget"] == 800
    assert await parts.store.load("t1", "s") == meta
    assert await parts.store.plans("t1", "s") == plans
    assert (len(parts.upstream.summaries), len(parts.upstream.sent)) == (summaries, sent)


async def test_a_side_request_is_answered_beside_its_session_and_never_stored(
    parts: Parts,
) -> None:
    """An agent's title request under its conversation's session id: other system
    messages, a conversation that does not go on from the stored one."""
    history = [SYSTEM, said("plan the trip")]
    await parts.turn(history)
    history += [echo("plan the trip"), said("and the budget?")]
    await parts.turn(history)
    stored = await parts.stored()
    title = [{"role": "system", "content": "Write a five-word title."}, said("plan the trip")]
    turn = await parts.turn(title)
    assert turn.side_request
    assert parts.upstream.sent[-1]["messages"] == title
    assert await parts.stored() == stored


async def test_a_summarized_message_comes_back_when_the_conversation_turns_to_it(
    make_parts: Any,
) -> None:
    parts = make_parts(window=2000)
    planted = "For the record: the vault code is 4471-ZETA and Ines Moreau keeps it."
    history = [said(planted), echo(planted), *conversation(6)]
    for end in range(2, len(history) + 1, 2):
        await parts.turn(history[: end - 1])
    meta = await parts.store.load("t1", "s")
    assert meta is not None and meta.checkpoint is not None
    assert meta.checkpoint.covers_until >= 2  # the planted message is summarized
    await parts.turn([*history, said("Who keeps the vault code?")])
    sent = parts.upstream.sent[-1]["messages"]
    recalled = [m for m in sent if str(m["content"]).startswith(RECALL_PREFIX)]
    assert len(recalled) == 1 and planted in recalled[0]["content"]
    assert sent[-2] == recalled[0] and sent[-1] == said("Who keeps the vault code?")


async def test_the_plan_record_says_what_was_sent_dated_by_the_engines_clock(
    make_parts: Any,
) -> None:
    parts = make_parts(window=1000)
    history = conversation(4)
    turn = await parts.turn([*history, said("and now?")])
    [record] = [orjson.loads(r) for r in await parts.store.plans("t1", "s")][-1:]
    assert record["at"] == parts.wall_clock()
    assert record["compression"] == "summary"
    assert (record["tokens_original"], record["tokens_sent"]) == (
        turn.tokens_original,
        turn.tokens_sent,
    )
    assert [part["kind"] for part in record["parts"]] == ["system", "summary", "window"]
    assert sum(part["tokens"] for part in record["parts"]) == turn.tokens_sent


@pytest.mark.parametrize("down", [False, True], ids=["summarized", "summarizer-down"])
async def test_every_turn_fits_its_budget(make_parts: Any, down: bool) -> None:
    parts = make_parts(window=1000)
    parts.upstream.summarizer_down = down
    history: list[dict[str, Any]] = []
    for number in range(10):
        history.append(said(" ".join(f"n{number}w{i}" for i in range(80))))
        turn = await parts.turn(list(history))
        history.append(echo(history[-1]["content"]))
        assert turn.tokens_sent is not None and turn.tokens_sent <= 800, number
        sent = parts.upstream.sent[-1]["messages"]
        assert sent[-1] == history[-2]  # the newest message is always sent whole
        assert not is_summarizer(sent)
    assert len(await parts.stored()) == 20


async def test_a_recall_block_takes_the_whole_room_when_no_tool_loop_can_follow(
    make_parts: Any,
) -> None:
    """Issue 52: a block for a request that offers tools leaves a quarter of its room for
    the tool loop to grow into (the block stays, bytes and all, while it does); one with
    no tools is followed by the user's next message, which asks anew, so it takes all
    the room and shows more of what was said."""
    history: list[dict[str, Any]] = []
    for number in range(40):
        note = f"Kayak log {number}: paddled past marker {number * 7} near the north cove."
        history += [said(note), echo(note)]
    history += conversation(6)
    question = said("What did the kayak log say about the north cove markers?")
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    shown = {}
    for session, extra in (("plain", {}), ("tools", {"tools": [tool]})):
        parts = make_parts(window=2000)
        for end in range(2, len(history) + 1, 2):
            await parts.turn(history[: end - 1], session)
        turn = await parts.turn([*history, question], session, **extra)
        sent = parts.upstream.sent[-1]["messages"]
        [block] = [m for m in sent if str(m["content"]).startswith(RECALL_PREFIX)]
        shown[session] = str(block["content"]).count("Kayak log")
        assert turn.tokens_sent <= 1600  # within 80% of the window, either way
    assert shown["tools"] > 0 and shown["plain"] >= 1.25 * shown["tools"]  # a third more room
