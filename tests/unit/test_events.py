"""A streamed turn's events (`proxy.engine.events.TurnEvents`) through the real engine
and disk store, the upstream's stream scripted: the events are relayed as they come,
but the reply's end (its finish and usage) only once the reply is stored, so a client
that hangs up at the end has a stored turn; the reply is stored once, and a stream cut
or failed before its end stores nothing and frees the session; a reply made here (an
agent's summary answered from the session's) comes as one batch."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from proxy.conversation.replies import StreamedReply
from proxy.costs.receipts import TurnCost
from proxy.engine.events import TurnEvents, made
from proxy.engine.planner.agent_compaction import answer, answer_chunks
from proxy.engine.types import RequestContext, Turn
from proxy.errors import UpstreamFailure
from proxy.sessions.records import Commit
from proxy.upstream.lean import Events
from tests.unit.engines import MODEL, Parts, conversation

Message = dict[str, Any]
KEY = ("t1", "s")
USAGE = {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}


def said(text: str) -> Message:
    return {"role": "user", "content": text}


def chunk(content: str | None = None, finish: str | None = None) -> dict[str, Any]:
    delta = {"content": content} if content else {}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def usage() -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": USAGE}


REPLY = [[chunk("Hel")], [chunk("lo")], [chunk(finish="stop")], [usage()]]


class Words:
    """A counter of words, for a reply made here."""

    def count_text(self, text: str) -> int:
        return len(text.split())


class Recorded:
    """A turn's observer that keeps what it was told, in order."""

    def __init__(self) -> None:
        self.told: list[str] = []
        self.usage: dict[str, Any] | None = None
        self.cost: TurnCost | None = None

    def planned(self, turn: Turn) -> None:
        self.told.append("planned")

    def upstream_started(self) -> None:
        self.told.append("started")

    def upstream_finished(self) -> None:
        self.told.append("finished")

    def first_token(self) -> None:
        self.told.append("token")

    def used(self, usage: dict[str, Any] | None) -> None:
        self.told.append("used")
        self.usage = usage

    def priced(self, cost: TurnCost | None) -> None:
        self.told.append("priced")
        self.cost = cost


def scripted(parts: Parts, batches: list[list[dict[str, Any]]], error: bool = False) -> None:
    """The upstream streams `batches`, then fails if `error`."""

    async def stream(
        params: dict[str, Any],
        messages_json: bytes | None = None,
        api_key: str | None = None,
        models: frozenset[str] | None = None,
    ) -> AsyncIterator[Events]:
        parts.upstream.sent.append(params)

        async def events() -> AsyncIterator[Events]:
            for batch in batches:
                yield Events(batch)
            if error:
                raise UpstreamFailure("the provider hung up")

        return events()

    parts.upstream.stream = stream  # type: ignore[method-assign]


async def opened(parts: Parts, messages: list[Message], observer: Recorded) -> TurnEvents:
    context = RequestContext(tenant="t1", session_id="s")
    return await parts.engine.stream({"model": MODEL, "messages": messages}, context, observer)


def commits(parts: Parts) -> list[Commit]:
    seen: list[Commit] = []
    commit = parts.store.commit

    async def recorded(change: Commit) -> bool:
        seen.append(change)
        return await commit(change)

    parts.store.commit = recorded  # type: ignore[method-assign]
    return seen


async def lock_is_free(parts: Parts) -> bool:
    token = await parts.store.try_lock(*KEY, 10.0, name="turn")
    if token is None:
        return False
    await parts.store.unlock(*KEY, token, name="turn")
    return True


async def test_the_end_of_a_stream_is_relayed_only_once_its_reply_is_stored(
    parts: Parts,
) -> None:
    scripted(parts, REPLY)
    observer = Recorded()
    events = await opened(parts, [said("hi")], observer)
    relayed: list[tuple[list[dict[str, Any]], int]] = []  # each batch, and what was stored
    async for batch in events:
        relayed.append((batch.chunks, len(await parts.stored())))
    await events.aclose()
    assert [chunks for chunks, _ in relayed] == REPLY  # all, in order
    assert [count for _, count in relayed] == [0, 0, 2, 2]  # the end, once stored
    assert await parts.stored() == [said("hi"), {"role": "assistant", "content": "Hello"}]
    assert await lock_is_free(parts)


async def test_the_observer_hears_of_the_stream_as_it_goes(parts: Parts) -> None:
    scripted(parts, REPLY)
    observer = Recorded()
    events = await opened(parts, [said("hi")], observer)
    async for _ in events:
        pass
    await events.aclose()
    assert observer.told == ["planned", "started", "token", "token", "used", "finished", "priced"]
    assert observer.usage == USAGE
    # 12 prompt tokens at $0.15 and 2 output tokens at $0.60 a million.
    assert observer.cost is not None and observer.cost.spent == pytest.approx(3e-6)


async def test_a_streamed_reply_is_stored_once(parts: Parts) -> None:
    seen = commits(parts)
    scripted(parts, REPLY)
    events = await opened(parts, [said("hi")], Recorded())
    async for _ in events:
        pass
    await events.aclose()
    await events.aclose()  # a door may end it again: nothing more is stored
    assert len(seen) == 1 and [e.message for e in seen[0].appended] == [
        said("hi"),
        {"role": "assistant", "content": "Hello"},
    ]
    assert len(await parts.stored()) == 2


async def test_a_summary_made_for_a_streamed_turn_is_charged_to_it_once(
    make_parts: Callable[..., Parts],
) -> None:
    parts = make_parts(window=1000)  # a budget of 800: a long conversation is folded now
    parts.upstream.usage = lambda params: {"prompt_tokens": 100, "completion_tokens": 10}
    scripted(parts, REPLY)
    events = await opened(parts, [*conversation(4), said("and now?")], Recorded())
    async for _ in events:
        pass
    await events.aclose()
    await parts.engine.summaries.wait(KEY)  # none is made ahead: nothing more is owed
    made_now = events.turn.summaries
    assert made_now > 0 and parts.upstream.summaries  # the summarizer was paid for
    meta = await parts.store.load(*KEY)
    assert meta is not None
    assert (meta.receipt.summaries, meta.receipt.owed) == (made_now, 0.0)


async def test_a_client_that_hangs_up_before_the_end_leaves_nothing_stored(
    parts: Parts,
) -> None:
    await parts.turn([said("one")])
    before = await parts.stored()
    scripted(parts, REPLY)
    events = await opened(parts, [*before, said("two")], Recorded())
    async for _ in events:
        break  # the client is gone after the first words
    assert not await lock_is_free(parts)  # the turn holds its session until it is ended
    await events.aclose()
    assert await parts.stored() == before
    assert await lock_is_free(parts)  # the session's next turn may start


async def test_a_stream_the_provider_cut_before_its_end_stores_nothing(parts: Parts) -> None:
    scripted(parts, REPLY[:2])  # words, and no finish
    observer = Recorded()
    events = await opened(parts, [said("hi")], observer)
    relayed = [batch.chunks async for batch in events]
    await events.aclose()
    assert relayed == REPLY[:2]
    assert await parts.stored() == []  # never stored as a complete reply
    assert observer.cost is None
    assert await lock_is_free(parts)


async def test_a_stream_the_provider_cut_owes_the_summary_it_made(
    make_parts: Callable[..., Parts],
) -> None:
    """Nothing of the turn is stored, but the summarizer's calls it made were paid for:
    the session owes them (they were lost before: a cut stream counted as answered)."""
    parts = make_parts(window=1000)  # a budget of 800: a long conversation is folded now
    parts.upstream.usage = lambda params: {"prompt_tokens": 100, "completion_tokens": 10}
    await parts.turn([said("one")])
    before = await parts.stored()
    scripted(parts, REPLY[:2])  # words, and no finish
    events = await opened(parts, [*before, *conversation(4), said("and now?")], Recorded())
    async for _ in events:
        pass
    await events.aclose()
    made_now = events.turn.summaries
    assert made_now > 0 and parts.upstream.summaries
    meta = await parts.store.load(*KEY)
    assert meta is not None and meta.length == len(before)  # the cut turn is not stored
    assert meta.receipt.owed == pytest.approx(made_now)
    assert await lock_is_free(parts)


async def test_a_stream_that_fails_midway_stores_nothing_and_frees_the_session(
    parts: Parts,
) -> None:
    scripted(parts, REPLY[:1], error=True)
    events = await opened(parts, [said("hi")], Recorded())
    relayed = []
    with pytest.raises(UpstreamFailure):
        async for batch in events:
            relayed.append(batch.chunks)
    await events.aclose()
    assert relayed == REPLY[:1]
    assert await parts.stored() == []
    assert await lock_is_free(parts)


async def test_a_reply_made_here_comes_as_one_batch() -> None:
    reply = answer("The parser is done.", [said("go on")], MODEL, Words())
    batches = [batch async for batch in made(reply)]
    assert [batch.chunks for batch in batches] == [answer_chunks(reply)]
    assert batches[0].raw is None  # made here: the door serializes it


async def test_a_summary_answered_from_the_session_streams_with_no_model_call(
    make_parts: Callable[..., Parts],
) -> None:
    parts = make_parts(window=1000)
    history = conversation(4)
    for end in range(2, len(history) + 1, 2):
        await parts.turn(history[: end - 1])
    stored, sent = await parts.stored(), len(parts.upstream.sent)
    request = said("Your task is to create a detailed summary of the conversation so far")
    observer = Recorded()
    events = await opened(parts, [*history, request], observer)
    streamed = StreamedReply()
    async for batch in events:
        for each in batch.chunks:
            streamed.add(each)
    await events.aclose()
    assert events.turn.answer is not None
    assert streamed.message() == events.turn.answer["choices"][0]["message"]
    assert len(parts.upstream.sent) == sent and "started" not in observer.told
    assert await parts.stored() == stored  # answered, never stored
    assert await lock_is_free(parts)
