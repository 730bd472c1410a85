"""Storing a turn (`proxy.engine.commit.Commits.stored`) on the real engine and disk
store: the client's new messages and the reply appended under compare-and-set on the
session's version, with its calibration, money and plan record; replayed onto a
background summary that landed while the turn ran; refused as a conflict, never undone,
when the transcript changed under it; not stored twice when the store's answer was
lost; and `Stored`, what the hooks after it read, is exactly what was stored."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import orjson
import pytest

from proxy.conversation.identity import message_hash
from proxy.costs.usage import usage_of
from proxy.engine.commit import Stored
from proxy.engine.types import RequestContext, Turn
from proxy.errors import SessionConflict, StoreUnavailable
from proxy.sessions.records import Checkpoint, Commit, Mode
from tests.unit.engines import MODEL, Parts, conversation

Message = dict[str, Any]
KEY = ("t1", "s")


def said(text: str) -> Message:
    return {"role": "user", "content": text}


def echo(text: str) -> Message:
    return {"role": "assistant", "content": f"echo: {text}"}


async def prepared(parts: Parts, messages: list[Message], mode: Mode = "auto") -> Turn:
    """A turn planned and holding its session's lock, not yet sent."""
    context = RequestContext(tenant="t1", session_id="s", mode=mode)
    return await parts.engine._prepare({"model": MODEL, "messages": messages}, context)


async def stored(
    parts: Parts, turn: Turn, reply: Message | None, usage: dict[str, Any] | None = None
) -> Stored | None:
    """The turn's commit, its lock given back however it went."""
    try:
        return await parts.engine.parts.commits.stored(turn, reply, usage, usage_of(usage))
    finally:
        await parts.engine._finish(turn)


def commits(parts: Parts) -> list[tuple[Commit, bool]]:
    """Every commit the store is given from now on, and whether it applied."""
    seen: list[tuple[Commit, bool]] = []
    commit = parts.store.commit

    async def recorded(change: Commit) -> bool:
        done = await commit(change)
        seen.append((change, done))
        return done

    parts.store.commit = recorded  # type: ignore[method-assign]
    return seen


async def session(parts: Parts, turns: int) -> list[Message]:
    """`turns` exchanges resent whole, turn by turn, and stored."""
    history: list[Message] = []
    for number in range(turns):
        history.append(said(f"question {number}"))
        await parts.turn(list(history))
        history.append(echo(f"question {number}"))
    return history


async def test_a_turn_is_appended_under_compare_and_set_and_stored_is_what_it_stored(
    parts: Parts,
) -> None:
    history = await session(parts, 1)
    base = await parts.store.load(*KEY)
    assert base is not None
    turn = await prepared(parts, [*history, said("two")])
    seen = commits(parts)
    usage = {"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45}
    done = await stored(parts, turn, echo("two"), usage)
    assert done is not None
    [(change, applied)] = seen
    assert applied and (change.expected_version, change.keep) == (base.version, 2)
    meta = await parts.store.load(*KEY)
    assert done.meta == meta and meta.version == base.version + 1
    assert [s.message for s in done.messages] == [said("two"), echo("two")]
    assert list(done.messages) == await parts.store.messages(*KEY, 2, 4)  # hashes, counts
    assert await parts.stored() == [*history, said("two"), echo("two")]
    name = "o200k_base"
    assert done.growth == meta.totals[name] - base.totals[name]
    assert done.growth == sum(s.tokens[name] for s in done.messages)
    # Its money: 40 prompt tokens at $0.15 and 5 output tokens at $0.60 a million.
    assert done.cost is not None and done.cost.spent == pytest.approx(9e-6)
    assert (meta.receipt.spent, meta.receipt.turns) == (done.cost.spent, 1)
    # The provider counted 40 of what we counted as `tokens_sent`: the session learns it.
    assert turn.tokens_sent is not None
    assert meta.calibration == {"gpt-4o-mini": 40 / turn.tokens_sent}
    # The plan record, stored with it, says which version it made and what it cost.
    record = orjson.loads((await parts.store.plans(*KEY))[-1])
    assert record["version"] == meta.version
    assert record["cost"] == done.cost.to_dict()
    assert record["usage"] == {"prompt": 40, "cache_read": 0, "cache_write": 0, "output": 5}


async def test_a_turn_is_replayed_onto_a_background_summary_that_landed(parts: Parts) -> None:
    history = await session(parts, 3)
    turn = await prepared(parts, [*history, said("three")])
    assert turn.state is not None
    read = turn.state.expected_version
    entries = await parts.store.messages(*KEY, 0, 6)
    before = {"o200k_base": sum(s.tokens["o200k_base"] for s in entries[:4])}
    landed = Checkpoint(4, entries[3].chain, ("Two questions.",), 3, "m", 1.0, before)
    assert await parts.engine.summaries.store(KEY, landed) is not None  # version + 1
    seen = commits(parts)
    done = await stored(parts, turn, echo("three"))
    assert done is not None
    assert [(c.expected_version, applied) for c, applied in seen] == [
        (read, False),  # refused: the summary had moved the version on
        (read + 1, True),  # replayed onto it
    ]
    assert done.meta == await parts.store.load(*KEY)
    assert (done.meta.version, done.meta.checkpoint, done.meta.checkpoints) == (
        read + 2,
        landed,
        1,
    )
    assert await parts.stored() == [*history, said("three"), echo("three")]  # once


async def test_a_summary_the_turn_made_is_stored_after_an_older_one_that_landed(
    make_parts: Callable[..., Parts],
) -> None:
    parts = make_parts(window=1000)  # a budget of 800: a long conversation is folded now
    await parts.turn([said("hello")])
    long = [said("hello"), echo("hello"), *conversation(4), said("and now?")]
    turn = await prepared(parts, long)
    assert turn.state is not None and turn.state.pending is not None
    made = turn.state.pending
    entries = await parts.store.messages(*KEY, 0, 2)
    before = {"o200k_base": sum(s.tokens["o200k_base"] for s in entries)}
    landed = Checkpoint(2, entries[1].chain, ("They said hello.",), 3, "m", 1.0, before)
    assert await parts.engine.summaries.store(KEY, landed) is not None
    done = await stored(parts, turn, echo("and now?"))
    assert done is not None
    meta = await parts.store.load(*KEY)
    assert meta is not None and meta.checkpoint is not None
    assert (meta.checkpoint.covers_until, meta.checkpoint.chain_hash) == (
        made.covers_until,
        made.chain_hash,
    )
    assert [c.covers_until for c in await parts.store.checkpoints(*KEY)] == [
        2,
        made.covers_until,
    ]
    assert await parts.stored() == [*long, echo("and now?")]


async def test_a_turn_whose_transcript_changed_under_it_is_a_conflict_never_undone(
    parts: Parts,
) -> None:
    history = await session(parts, 1)
    late = await prepared(parts, [*history, said("two")])
    assert late.lease is not None
    await parts.engine.parts.locks.release(late.lease)  # its lease lapsed: another turn went
    await parts.turn([*history, said("three")])
    went_on = await parts.stored()
    assert went_on == [*history, said("three"), echo("three")]
    with pytest.raises(SessionConflict) as raised:
        await stored(parts, replace(late, lease=None), echo("two"))
    assert raised.value.code == "conflict"
    assert await parts.stored() == went_on  # the turn that went on stands


async def test_a_turn_that_only_appends_is_stored_after_one_that_overtook_it(
    parts: Parts,
) -> None:
    """A client that sends only its new message cuts nothing away: its turn goes after
    the one that was stored first, and neither is lost."""
    history = await session(parts, 1)
    late = await prepared(parts, [said("two")], mode="append")
    assert late.lease is not None
    await parts.engine.parts.locks.release(late.lease)
    await parts.turn([said("three")], mode="append")
    done = await stored(parts, replace(late, lease=None), echo("two"))
    assert done is not None
    expected = [*history, said("three"), echo("three"), said("two"), echo("two")]
    assert await parts.stored() == expected
    assert done.meta == await parts.store.load(*KEY) and done.meta.length == 6


async def test_a_commit_whose_answer_was_lost_is_not_stored_twice(parts: Parts) -> None:
    history = await session(parts, 1)
    commit = parts.store.commit

    async def applied_then_lost(change: Commit) -> bool:
        await commit(replace(change, release=None))  # applied; the lock not given back
        raise StoreUnavailable("no answer in time")

    parts.store.commit = applied_then_lost  # type: ignore[method-assign]
    turn = await prepared(parts, [*history, said("two")])
    done = await stored(parts, turn, echo("two"))
    assert done is not None and done.meta == await parts.store.load(*KEY)
    assert await parts.stored() == [*history, said("two"), echo("two")]
    # The turn gave its lock back itself, as the commit could not be known to have.
    assert turn.lease is not None and not turn.lease.stored
    token = await parts.store.try_lock(*KEY, 10.0, name="turn")
    assert token is not None
    await parts.store.unlock(*KEY, token, name="turn")


async def test_a_commit_that_never_applied_fails_the_turn_and_stores_nothing(
    parts: Parts,
) -> None:
    history = await session(parts, 1)
    commit = parts.store.commit

    async def lost(change: Commit) -> bool:
        raise StoreUnavailable("no answer in time")

    parts.store.commit = lost  # type: ignore[method-assign]
    turn = await prepared(parts, [*history, said("two")])
    with pytest.raises(StoreUnavailable):
        await stored(parts, turn, echo("two"))
    parts.store.commit = commit  # type: ignore[method-assign]
    assert await parts.stored() == history


async def test_what_is_not_a_turn_of_its_session_stores_nothing(parts: Parts) -> None:
    history = await session(parts, 1)
    meta = await parts.store.load(*KEY)
    # A stream cut before the reply was complete: no reply to store.
    turn = await prepared(parts, [*history, said("two")])
    assert await stored(parts, turn, None) is None
    # A request with no session.
    context = RequestContext(tenant="t1")
    stateless = await parts.engine._prepare({"model": MODEL, "messages": [said("x")]}, context)
    assert await stored(parts, stateless, echo("x")) is None
    assert await parts.store.load(*KEY) == meta
    # A side request that made a summary: not stored, but the session owes the summary.
    turn = await prepared(parts, [*history, said("two")])
    assert await stored(parts, replace(turn, side_request=True, summaries=0.25), echo("t")) is None
    after = await parts.store.load(*KEY)
    assert meta is not None and after is not None
    assert (after.length, after.receipt.owed) == (meta.length, meta.receipt.owed + 0.25)


async def test_a_long_reply_is_stored_cut_under_the_whole_replys_hash(
    make_parts: Callable[..., Parts],
) -> None:
    parts = make_parts(session={"max_reply_bytes": 1024})
    long = {"role": "assistant", "content": "word " * 1000}
    turn = await prepared(parts, [said("one")])
    done = await stored(parts, turn, long)
    assert done is not None
    entry = done.messages[-1]
    assert entry.hash == message_hash(long)  # the client's whole copy is recognised
    assert entry.message != long and len(orjson.dumps(entry.message)) < 1024
    assert turn.request is not None
    assert entry.tokens == {"o200k_base": turn.request.counter.count_message(long)}
    # The client resends its whole copy: the session goes on, nothing is forked.
    later = await parts.turn([said("one"), long, said("two")])
    assert later.state is not None and later.state.match.kind == "full"
