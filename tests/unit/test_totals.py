"""A session's token totals as a request leaves it (`proxy.engine.totals.Totals`, through
`History.state` on the real engine and disk store): a long conversation far from its
budget is known by its bound (a token per byte) and never tokenized, the bound grows
with each message and gives back what a retry cuts, and once it is outgrown, or the
history is edited, or a tokenizer is new to the session, the totals are recounted from
the stored messages, reading only what the change needs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from proxy.conversation.tokens import BOUND, TokenCounter, counter_by_name, token_bound
from proxy.engine.types import Request, RequestContext, SessionView
from proxy.sessions.records import Checkpoint, Mode, StoredMessage
from tests.unit.engines import MODEL, Parts, conversation

Message = dict[str, Any]
LONG = conversation(60)  # 120 messages, about 52 kB: well over the 32 kB counted at once


def said(text: str) -> Message:
    return {"role": "user", "content": text}


def echo(text: str) -> Message:
    return {"role": "assistant", "content": f"echo: {text}"}


def exploding(name: str) -> TokenCounter:
    """A tokenizer by `name` that fails the test if anything is counted by it."""

    def count(text: str) -> int:
        raise AssertionError("tokenized")

    return TokenCounter(name, count)


async def request(parts: Parts, messages: list[Message], mode: Mode = "auto") -> Request:
    context = RequestContext(tenant="t1", session_id="s", mode=mode)
    return await parts.engine.parts.intake.request({"model": MODEL, "messages": messages}, context)


async def state(parts: Parts, asked: Request) -> SessionView:
    return await parts.engine.parts.history.state(asked)


def reads(parts: Parts) -> list[tuple[int, int]]:
    """The ranges of stored messages read from now on."""
    ranges: list[tuple[int, int]] = []
    messages = parts.store.messages

    async def counted(tenant: str, session_id: str, start: int, end: int) -> list[StoredMessage]:
        ranges.append((start, end))
        return await messages(tenant, session_id, start, end)

    parts.store.messages = counted  # type: ignore[method-assign]
    return ranges


def count(counter: TokenCounter, messages: list[Message]) -> int:
    return sum(counter.count_message(message) for message in messages)


async def bounded_session(parts: Parts) -> int:
    """A session opened with LONG (its last reply aside) and answered: its bound."""
    await parts.turn(LONG[:-1])
    meta = await parts.store.load("t1", "s")
    assert meta is not None and set(meta.totals) == {BOUND.name}
    assert await parts.stored() == LONG  # the scripted reply is LONG's last message
    return meta.totals[BOUND.name]


async def test_a_long_conversation_far_from_its_budget_is_known_by_its_bound_untokenized(
    parts: Parts,
) -> None:
    asked = await request(parts, LONG[:-1])
    seen = await state(parts, replace(asked, counter=exploding(asked.counter.name)))
    # The serialized conversation's bound: a token per byte, one more per "," and ":".
    bound = token_bound(orjson.dumps(LONG[:-1]), 1)
    assert seen.totals == {BOUND.name: bound} and not seen.counted
    assert bound >= count(asked.counter, LONG[:-1])  # a bound indeed
    assert [s.message for s in seen.new] == LONG[:-1]
    assert all(s.tokens == {} for s in seen.new)  # nothing counted, by anything
    assert (seen.checkpoint, seen.checkpoints) == (None, 0)


async def test_a_short_conversation_is_counted_at_once(parts: Parts) -> None:
    short = conversation(3)
    asked = await request(parts, short)
    seen = await state(parts, asked)
    name = asked.counter.name
    assert seen.counted and seen.totals == {name: count(asked.counter, short)}
    assert [s.tokens for s in seen.new] == [{name: asked.counter.count_message(m)} for m in short]


async def test_a_conversation_whose_bound_is_over_what_may_go_uncounted_is_counted(
    parts: Parts,
) -> None:
    asked = await request(parts, LONG[:-1])
    bound = token_bound(orjson.dumps(LONG[:-1]), 1)
    at_the_limit = await state(parts, replace(asked, sendable_uncounted=bound))
    assert at_the_limit.totals == {BOUND.name: bound}
    over = await state(parts, replace(asked, sendable_uncounted=bound - 1))
    assert over.totals == {asked.counter.name: count(asked.counter, LONG[:-1])}


async def test_a_bounded_session_grows_by_each_new_messages_bound(parts: Parts) -> None:
    carried = await bounded_session(parts)
    ranges = reads(parts)
    asked = await request(parts, [*LONG, said("more")])
    seen = await state(parts, replace(asked, counter=exploding(asked.counter.name)))
    grown = BOUND.count_message(said("more"))
    assert seen.totals == {BOUND.name: carried + grown}
    assert [s.tokens for s in seen.new] == [{BOUND.name: grown}]
    assert ranges == []  # known from the meta and the new message alone


async def test_a_retry_gives_back_the_bound_of_the_reply_it_cuts(parts: Parts) -> None:
    carried = await bounded_session(parts)
    ranges = reads(parts)
    asked = await request(parts, LONG[:-1])  # the same request again: a new reply asked
    seen = await state(parts, replace(asked, counter=exploding(asked.counter.name)))
    assert (seen.match.kind, seen.kept, seen.new) == ("fork", 119, ())
    assert seen.totals == {BOUND.name: carried - BOUND.count_message(LONG[-1])}
    assert ranges == [(119, 120)]  # only the cut reply is read


async def test_an_outgrown_bound_is_recounted_from_the_stored_messages(parts: Parts) -> None:
    carried = await bounded_session(parts)
    ranges = reads(parts)
    asked = await request(parts, [*LONG, said("more")])
    grown = BOUND.count_message(said("more"))
    seen = await state(parts, replace(asked, sendable_uncounted=carried + grown - 1))
    counter = asked.counter
    assert seen.counted
    assert seen.totals == {counter.name: count(counter, [*LONG, said("more")])}
    assert (0, 120) in ranges  # the whole transcript, read once to be counted


async def counted_session(parts: Parts, turns: int = 3) -> list[Message]:
    """A short session resent turn by turn and answered: counted from its first turn."""
    history: list[Message] = []
    for number in range(turns):
        history.append(said(f"question {number}"))
        await parts.turn(list(history))
        history.append(echo(f"question {number}"))
    assert await parts.stored() == history
    return history


async def test_an_edit_of_history_takes_away_only_what_it_cuts(parts: Parts) -> None:
    history = await counted_session(parts)
    meta = await parts.store.load("t1", "s")
    assert meta is not None
    ranges = reads(parts)
    asked = await request(parts, [*history[:2], said("an edited second question")])
    seen = await state(parts, asked)
    counter = asked.counter
    assert (seen.match.kind, seen.kept) == ("fork", 2)
    edited = counter.count_message(said("an edited second question"))
    assert seen.totals == {counter.name: count(counter, history[:2]) + edited}
    assert (2, 6) in ranges and (0, 6) not in ranges  # the cut part, not the whole


async def test_an_edit_before_a_summary_recounts_and_drops_the_summary_of_what_it_cut(
    parts: Parts,
) -> None:
    history = await counted_session(parts)
    stored = await parts.store.messages("t1", "s", 0, 6)
    covered = {"o200k_base": sum(s.tokens["o200k_base"] for s in stored[:4])}
    summary = Checkpoint(4, stored[3].chain, ("Two questions.",), 3, "m", 1.0, covered)
    assert await parts.engine.summaries.store(("t1", "s"), summary) is not None
    asked = await request(parts, [*history[:2], said("an edited second question")])
    seen = await state(parts, asked)
    counter = asked.counter
    edited = counter.count_message(said("an edited second question"))
    assert seen.totals == {counter.name: count(counter, history[:2]) + edited}
    assert (seen.checkpoint, seen.checkpoints) == (None, 0)  # it summarized what is cut
    # An edit after the summary keeps it, and what it covers.
    asked = await request(parts, [*history[:4], said("an edited third question")])
    seen = await state(parts, asked)
    assert (seen.checkpoint, seen.checkpoints) == (summary, 1)


async def test_a_tokenizer_new_to_the_session_counts_it_all_again(parts: Parts) -> None:
    history = await counted_session(parts)
    stored = await parts.store.messages("t1", "s", 0, 6)
    summary = Checkpoint(
        4, stored[3].chain, ("Two questions.",), 3, "m", 1.0, {"o200k_base": 4 * 10}
    )
    assert await parts.engine.summaries.store(("t1", "s"), summary) is not None
    ranges = reads(parts)
    asked = await request(parts, [*history, said("next")])
    other = counter_by_name("cl100k_base")
    seen = await state(parts, replace(asked, counter=other))
    whole = [*history, said("next")]
    assert seen.totals == {
        "o200k_base": count(asked.counter, whole),
        "cl100k_base": count(other, whole),
    }
    assert (0, 6) in ranges
    # The summary's prefix is counted by both, from the messages it covers.
    assert seen.checkpoint is not None
    assert seen.checkpoint.before == {
        "o200k_base": count(asked.counter, history[:4]),
        "cl100k_base": count(other, history[:4]),
    }
    assert seen.new[0].tokens == {
        "o200k_base": asked.counter.count_message(said("next")),
        "cl100k_base": other.count_message(said("next")),
    }


async def test_a_message_stored_without_a_tokenizers_count_is_counted_as_a_copy(
    parts: Parts,
) -> None:
    await counted_session(parts, turns=1)
    stored = await parts.store.messages("t1", "s", 0, 2)
    totals = parts.engine.parts.history._totals
    counter = counter_by_name("o200k_base")
    assert await totals.counted(stored, {"o200k_base"}, counter) is stored  # nothing to do
    other = counter_by_name("cl100k_base")
    found = await totals.counted(stored, {"o200k_base", "cl100k_base"}, counter)
    assert [s.tokens["cl100k_base"] for s in found] == [
        other.count_message(s.message) for s in stored
    ]
    assert [s.tokens["o200k_base"] for s in found] == [s.tokens["o200k_base"] for s in stored]
    assert all("cl100k_base" not in s.tokens for s in stored)  # what was read stays as read
