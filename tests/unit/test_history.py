"""A session's history as a request leaves it (`History.state`): what the client sent,
told apart from what is stored, with the stored transcript read only where that needs
it; and the meta the turn's commit will write (`proxy.engine.commit.stored_meta`)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.engine.commit import reply_entry, stored_meta
from proxy.engine.types import Request, RequestContext
from proxy.sessions.records import Mode, StoredMessage
from tests.unit.engines import MODEL, Parts, conversation


def said(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def echo(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": f"echo: {text}"}


async def request(parts: Parts, messages: list[dict[str, Any]], mode: Mode = "auto") -> Request:
    context = RequestContext(tenant="t1", session_id="s", mode=mode)
    return await parts.engine.parts.intake.request({"model": MODEL, "messages": messages}, context)


def reads(parts: Parts) -> list[tuple[int, int]]:
    """The ranges of stored messages read from now on."""
    ranges: list[tuple[int, int]] = []
    messages = parts.store.messages

    async def counted(tenant: str, session_id: str, start: int, end: int) -> list[StoredMessage]:
        ranges.append((start, end))
        return await messages(tenant, session_id, start, end)

    parts.store.messages = counted  # type: ignore[method-assign]
    return ranges


async def test_a_full_resend_is_known_by_its_prefix_and_only_the_new_is_counted(
    parts: Parts,
) -> None:
    history = conversation(3)
    for end in range(2, len(history) + 1, 2):
        await parts.turn(history[: end - 1])
    meta = await parts.store.load("t1", "s")
    assert meta is not None
    ranges = reads(parts)
    asked = await request(parts, [*history, said("next")])
    state = await parts.engine.parts.history.state(asked)
    assert ranges == []  # the stored transcript is not read
    assert (state.match.kind, state.kept) == ("full", 6)
    assert [s.message for s in state.new] == [said("next")]
    name = asked.counter.name
    new_tokens = asked.counter.count_message(said("next"))
    assert state.totals == {name: meta.totals[name] + new_tokens}
    assert state.new[0].tokens == {name: new_tokens}


async def test_a_client_that_sends_only_its_new_turn_appends_it(parts: Parts) -> None:
    await parts.turn([said("one")])
    ranges = reads(parts)
    state = await parts.engine.parts.history.state(await request(parts, [said("two")]))
    assert ranges == []
    assert (state.match.kind, state.kept, state.length) == ("append", 2, 3)
    assert [s.message for s in state.new] == [said("two")]


async def test_an_edit_cuts_the_transcript_there_and_recounts_what_it_keeps(
    make_parts: Any,
) -> None:
    parts = make_parts(window=1000)
    history = conversation(4)
    for end in range(2, len(history) + 1, 2):
        await parts.turn(history[: end - 1])
    asked = await request(parts, [*history[:4], said("edited")])
    state = await parts.engine.parts.history.state(asked)
    assert (state.match.kind, state.kept) == ("fork", 4)
    kept = await parts.store.messages("t1", "s", 0, 4)
    name = asked.counter.name
    edited = asked.counter.count_message(said("edited"))
    assert state.totals == {name: sum(s.tokens[name] for s in kept) + edited}
    # The summary in effect is the newest that covers only what the edit kept.
    assert state.checkpoint is not None and state.checkpoint.covers_until == 4
    assert state.checkpoints == 2
    window = await parts.engine.parts.history.window(asked, state, 2)
    assert [s.message for s in window] == [*history[2:4], said("edited")]


async def test_a_tool_result_must_answer_a_call_the_session_made(parts: Parts) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    parts.upstream.reply = lambda body: ""
    await parts.turn([said("use the tool")])
    stored = await parts.store.messages("t1", "s", 0, 2)
    assert stored[-1].message == {"role": "assistant", "content": ""}
    # A result appended after a reply that called nothing is refused, naming it.
    result = {"role": "tool", "tool_call_id": call["id"], "content": "42"}
    with pytest.raises(Exception, match=r"answers tool call `call_1`") as raised:
        await parts.engine.parts.history.state(await request(parts, [result], mode="append"))
    assert getattr(raised.value, "status_code", 400) == 400


async def test_after_the_reply_the_meta_counts_the_turn(parts: Parts) -> None:
    await parts.turn([said("one")])
    asked = await request(parts, [said("one"), echo("one"), said("two")])
    state = await parts.engine.parts.history.state(asked)
    name = asked.counter.name
    reply = await reply_entry(
        echo("two"), state.new[-1].chain, asked.counter, state.totals, 1 << 20
    )
    meta, checkpoints = stored_meta(asked, state, reply, {}, "", 1_700_000_000.0)
    assert (meta.version, meta.length, meta.head) == (2, 4, reply.chain)
    assert meta.totals == {name: state.totals[name] + reply.tokens[name]}
    assert checkpoints == ()
    assert meta.fingerprint is not None and meta.fingerprint.count == 3  # what it resent


async def test_a_window_read_again_reads_only_what_the_store_added_since(parts: Parts) -> None:
    """A client that sends only its new turn gets the window the store holds; reading it
    again costs the messages added since, never the whole window, while the store still
    holds what was read (an edit of history elsewhere is read whole)."""
    history = conversation(4)
    for end in range(2, len(history) + 1, 2):
        await parts.turn(history[: end - 1])
    ranges = reads(parts)
    asked = await request(parts, [said("five")], mode="append")
    state = await parts.engine.parts.history.state(asked)
    window = await parts.engine.parts.history.window(asked, state, 0)
    assert [s.message for s in window] == [*history, said("five")]
    assert ranges == [(0, 8)]
    await parts.turn([said("five")], mode="append")
    ranges.clear()
    asked = await request(parts, [said("six")], mode="append")
    state = await parts.engine.parts.history.state(asked)
    window = await parts.engine.parts.history.window(asked, state, 0)
    five = [said("five"), echo("five")]
    assert [s.message for s in window] == [*history, *five, said("six")]
    assert ranges == [(7, 10)]  # the last message read before, to check, and the turn since
    # Another replica rewrote the session: what the store holds now is read, whole.
    await parts.turn([*history[:4], said("edited")])
    ranges.clear()
    asked = await request(parts, [said("seven")], mode="append")
    state = await parts.engine.parts.history.state(asked)
    window = await parts.engine.parts.history.window(asked, state, 0)
    edited = [said("edited"), echo("edited")]
    assert [s.message for s in window] == [*history[:4], *edited, said("seven")]
    assert (0, 6) in ranges
