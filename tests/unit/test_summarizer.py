"""Summary checkpoints as the engine makes, stores and schedules them
(`proxy.engine.folds.summarizer`; the fold's own text work, `proxy.summary.fold`, is
`test_summarize.py`'s), on the real engine's summarizer over a disk store, the model's
call scripted: what a summary's calls cost (`Bill`), how long a summary may be, the agent
context it keeps, what it covers and counts; a chapter made with no model call; a
checkpoint stored only over the transcript it summarizes; and one background summary per
session at a time, across processes too, whose failure is logged without credentials."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

import pytest

from proxy.conversation.tokens import counter_for_model
from proxy.costs.prices import Prices
from proxy.costs.usage import Usage
from proxy.engine.folds.summarizer import Bill
from proxy.observability import metrics
from proxy.sessions.records import Checkpoint, StoredMessage
from proxy.summary.fold import SummarizationError
from tests.unit.engines import MODEL, SUMMARY, Parts, conversation

Message = dict[str, Any]
KEY = ("t1", "s")
PRICES = Prices(input=1e-6, output=4e-6, cache_read=1e-7, cache_write=1.25e-6)
REMINDER = "<system-reminder>\nCLAUDE.md says: indent with tabs.\n</system-reminder>"
LATER = "<system-reminder>\nThe date is now 2025-01-02.\n</system-reminder>"


def said(text: str) -> Message:
    return {"role": "user", "content": text}


async def transcript(parts: Parts, history: list[Message]) -> list[StoredMessage]:
    """`history` sent at once and answered: the stored transcript."""
    await parts.turn(history)
    meta = await parts.store.load(*KEY)
    assert meta is not None
    return await parts.store.messages(*KEY, 0, meta.length)


def caps(parts: Parts) -> list[int]:
    """The `max_tokens` of each summarizer call from now on."""
    seen: list[int] = []
    complete_text = parts.upstream.complete_text

    async def recorded(
        model: str, messages: list[Message], max_tokens: int, api_key: str | None = None
    ) -> tuple[str, dict[str, Any] | None]:
        seen.append(max_tokens)
        return await complete_text(model, messages, max_tokens, api_key)

    parts.upstream.complete_text = recorded  # type: ignore[method-assign]
    return seen


# -- what a summary costs ---------------------------------------------------------------


def test_a_bill_adds_up_each_calls_usage_and_price() -> None:
    bill = Bill()
    bill.add(Usage(1000, output=100), PRICES)
    bill.add(Usage(2000, cache_read=500, output=50), PRICES)
    assert bill.calls == 2
    assert bill.usage == Usage(3000, cache_read=500, output=150)
    # 1000 × $1 + 100 × $4, then 1500 × $1 + 500 × $0.10 + 50 × $4, a million tokens.
    assert bill.usd == pytest.approx((1000 + 400 + 1500 + 50 + 200) * 1e-6)
    assert bill.charge == bill.usd


def test_a_bill_with_a_call_of_unknown_price_has_no_figure_and_charges_nothing() -> None:
    for unknown in ((Usage(1000), None), (None, PRICES)):
        bill = Bill()
        bill.add(Usage(1000, output=10), PRICES)
        bill.add(*unknown)
        assert (bill.calls, bill.usd, bill.charge) == (2, None, 0.0)
        bill.add(Usage(1000), PRICES)  # a later priced call gives it no figure back
        assert bill.usd is None


# -- making one -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("room", "cap"),
    [
        (1000, 500),  # half of the room the fold's verbatim window leaves
        (10_000, 1024),  # never over `max_summary_tokens`
        (40, 32),  # never under 32
    ],
)
async def test_a_summary_takes_at_most_a_share_of_the_room_it_is_read_in(
    parts: Parts, room: int, cap: int
) -> None:
    entries = await transcript(parts, conversation(2)[:-1])
    asked = caps(parts)
    await parts.engine.summaries.make(entries[:2], 2, None, MODEL, room, "sync")
    assert asked == [cap]


async def test_a_summary_covers_its_span_and_counts_what_it_covers(parts: Parts) -> None:
    entries = await transcript(parts, conversation(3)[:-1])
    parts.wall_clock.advance(60.0)
    made = await parts.engine.summaries.make(entries[:4], 4, None, MODEL, 10_000, "sync")
    assert (made.covers_until, made.chain_hash) == (4, entries[3].chain)
    assert (made.segments, made.model, made.created) == ((SUMMARY,), MODEL, parts.wall_clock())
    assert made.before == {"o200k_base": sum(s.tokens["o200k_base"] for s in entries[:4])}
    assert made.tokens == counter_for_model(MODEL).count_text(made.text)
    # A later one follows it: what it covers is added to what that one covered.
    later = await parts.engine.summaries.make(entries[4:], 6, made, MODEL, 10_000, "sync")
    assert later.covers_until == 6 and later.segments == (SUMMARY, SUMMARY)
    assert later.before == {
        "o200k_base": made.before["o200k_base"] + sum(s.tokens["o200k_base"] for s in entries[4:])
    }


async def test_a_prefix_some_tokenizer_did_not_count_whole_is_not_counted_by_it(
    parts: Parts,
) -> None:
    entries = await transcript(parts, conversation(2)[:-1])
    partly = [replace(entries[0], tokens={**entries[0].tokens, "cl100k_base": 7}), entries[1]]
    made = await parts.engine.summaries.make(partly, 2, None, MODEL, 10_000, "sync")
    assert set(made.before) == {"o200k_base"}
    previous = replace(made, before={"cl100k_base": 20})  # counted by another tokenizer
    both = [replace(s, tokens={**s.tokens, "cl100k_base": 5}) for s in entries[2:]]
    later = await parts.engine.summaries.make(both, 4, previous, MODEL, 10_000, "sync")
    assert later.before == {"cl100k_base": 20 + 5 * len(both)}


async def test_the_agent_context_of_the_first_message_is_kept_beside_the_summary(
    parts: Parts,
) -> None:
    first = said(f"{REMINDER}\nWhat is the plan?")
    entries = await transcript(
        parts, [first, {"role": "assistant", "content": "A plan."}, said(f"{LATER}\ngo")]
    )
    summaries = parts.engine.summaries
    made = await summaries.make(entries[:2], 2, None, MODEL, 10_000, "sync")
    assert made.kept == (REMINDER,)
    later = await summaries.make(entries[2:4], 4, made, MODEL, 10_000, "sync")
    assert later.kept == (REMINDER,)  # its predecessor's, which the conversation opened with
    # A span that does not open the conversation keeps none of its own: context an
    # agent adds to a later message is the model's to read there.
    middle = await summaries.make(entries[2:4], 4, None, MODEL, 10_000, "sync")
    assert middle.kept == ()


async def test_a_summarizer_that_keeps_failing_is_not_called_while_its_breaker_is_open(
    parts: Parts,
) -> None:
    entries = await transcript(parts, conversation(2)[:-1])
    summaries = parts.engine.summaries
    parts.upstream.summarizer_down = True
    for _ in range(3):  # `summary_breaker_failures`
        with pytest.raises(SummarizationError, match="summarizer call failed"):
            await summaries.make(entries[:2], 2, None, MODEL, 10_000, "sync")
    asked = len(parts.upstream.summaries)
    parts.upstream.summarizer_down = False
    with pytest.raises(SummarizationError, match="breaker is open"):
        await summaries.make(entries[:2], 2, None, MODEL, 10_000, "sync")
    assert len(parts.upstream.summaries) == asked  # not called
    parts.clock.advance(5.0)  # `summary_backoff_seconds`: one trial goes through
    made = await summaries.make(entries[:2], 2, None, MODEL, 10_000, "sync")
    assert made.segments == (SUMMARY,)


async def test_a_chapter_covers_the_conversation_with_no_model_call(parts: Parts) -> None:
    entries = await transcript(parts, conversation(2)[:-1])
    summaries = parts.engine.summaries
    totals = {"o200k_base": 123}
    chapter = await summaries.chapter(entries, 4, None, totals)
    assert (chapter.covers_until, chapter.chain_hash) == (4, entries[3].chain)
    assert (chapter.segments, chapter.text, chapter.tokens) == ((), "", 0)
    assert chapter.before == totals and chapter.index is not None  # recallable
    assert parts.upstream.summaries == []


# -- storing one ------------------------------------------------------------------------


def covering(entries: list[StoredMessage], end: int, text: str = "So far.") -> Checkpoint:
    before = {"o200k_base": sum(s.tokens["o200k_base"] for s in entries[:end])}
    return Checkpoint(end, entries[end - 1].chain, (text,), 3, "m", 1.0, before)


async def test_a_checkpoint_is_stored_over_the_transcript_it_summarizes(parts: Parts) -> None:
    entries = await transcript(parts, conversation(3)[:-1])
    summaries = parts.engine.summaries
    base = await parts.store.load(*KEY)
    assert base is not None
    parts.wall_clock.advance(30.0)
    stored = await summaries.store(KEY, covering(entries, 4))
    assert stored is not None and stored == await parts.store.load(*KEY)
    assert (stored.version, stored.checkpoints, stored.length) == (base.version + 1, 1, 6)
    assert stored.checkpoint == covering(entries, 4) and stored.updated == parts.wall_clock()
    # The whole transcript: pinned by the session's head.
    whole = await summaries.store(KEY, covering(entries, 6))
    assert whole is not None and whole.checkpoints == 2
    assert [c.covers_until for c in await parts.store.checkpoints(*KEY)] == [4, 6]


async def test_a_checkpoint_that_no_longer_applies_is_not_stored(parts: Parts) -> None:
    entries = await transcript(parts, conversation(3)[:-1])
    summaries = parts.engine.summaries
    assert await summaries.store(KEY, covering(entries, 4)) is not None
    meta = await parts.store.load(*KEY)
    # Not newer than the one stored; past the transcript's end; of another transcript
    # (the history was edited since it was read); of a session that is gone.
    edited = replace(covering(entries, 5), chain_hash="0" * 32)
    for stale in (covering(entries, 4), covering(entries, 3)):
        assert await summaries.store(KEY, stale) is None
    assert await summaries.store(KEY, replace(covering(entries, 6), covers_until=7)) is None
    assert await summaries.store(KEY, edited) is None
    assert await summaries.store(KEY, replace(covering(entries, 6), chain_hash="0" * 32)) is None
    assert await parts.store.load(*KEY) == meta
    assert await summaries.store(("t1", "gone"), covering(entries, 4)) is None


async def test_a_summary_made_in_the_background_is_owed_whether_it_applies_or_not(
    parts: Parts,
) -> None:
    entries = await transcript(parts, conversation(3)[:-1])
    summaries = parts.engine.summaries
    assert await summaries.store(KEY, covering(entries, 4), owed=0.25) is not None
    assert await summaries.store(KEY, covering(entries, 4), owed=0.5) is None  # stale
    assert await summaries.store(KEY, None, owed=0.125) is None  # one that failed
    meta = await parts.store.load(*KEY)
    assert meta is not None and meta.checkpoints == 1
    assert meta.receipt.owed == 0.875  # the next priced turn is charged them


# -- running them in the background -------------------------------------------------------


async def test_one_background_summary_runs_per_session_at_a_time(parts: Parts) -> None:
    summaries = parts.engine.summaries
    started, done, ran = asyncio.Event(), asyncio.Event(), []

    async def first() -> None:
        ran.append("first")
        started.set()
        await done.wait()

    async def second() -> None:
        ran.append("second")

    summaries.schedule(KEY, first)
    await started.wait()
    summaries.schedule(KEY, second)  # one runs already: not started
    summaries.schedule(("t1", "other"), second)  # another session's runs beside it
    await summaries.wait(("t1", "other"))
    assert ran == ["first", "second"] and summaries.running(KEY) is not None
    done.set()
    await summaries.wait(KEY)
    assert summaries.running(KEY) is None
    summaries.schedule(KEY, second)  # once it is over, the next may run
    await summaries.wait(KEY)
    assert ran == ["first", "second", "second"]


async def test_a_session_another_process_summarizes_is_left_to_it(parts: Parts) -> None:
    summaries, ran = parts.engine.summaries, []

    async def job() -> None:
        ran.append("job")

    token = await parts.store.try_lock(*KEY, 60.0, name="summary")  # another process's
    assert token is not None
    summaries.schedule(KEY, job)
    await summaries.wait(KEY)
    assert ran == [] and summaries.running(KEY) is None
    await parts.store.unlock(*KEY, token, name="summary")
    summaries.schedule(KEY, job)
    await summaries.wait(KEY)
    assert ran == ["job"]


async def test_the_gauge_counts_a_background_summary_from_its_scheduling_to_its_end(
    parts: Parts,
) -> None:
    """An operator (and the cost benchmark, waiting between turns) reads the gauge as "a
    summary may still land": it is up as soon as one is scheduled, however it then ends."""
    summaries, done = parts.engine.summaries, asyncio.Event()

    def running() -> float:
        return metrics.BACKGROUND_TASKS._value.get()

    async def job() -> None:
        await done.wait()

    before = running()
    summaries.schedule(KEY, job)
    assert running() == before + 1  # before the task took the session's summary lock
    done.set()
    await summaries.wait(KEY)
    await asyncio.sleep(0)  # the task's done callbacks
    assert running() == before
    token = await parts.store.try_lock(*KEY, 60.0, name="summary")  # another process's
    assert token is not None
    summaries.schedule(KEY, job)  # left to it, and counted until it gives way
    assert running() == before + 1
    await summaries.wait(KEY)
    await asyncio.sleep(0)
    assert running() == before
    await parts.store.unlock(*KEY, token, name="summary")
    summaries.schedule(KEY, job)
    await summaries.close()  # cancelled before it ran a line
    assert running() == before


async def test_a_failed_background_summary_is_logged_without_credentials(
    parts: Parts, caplog: pytest.LogCaptureFixture
) -> None:
    summaries = parts.engine.summaries

    async def failing() -> None:
        raise RuntimeError("provider said no to key hunter2-provider-key")

    with caplog.at_level(logging.WARNING, logger="context_proxy.summaries"):
        summaries.schedule(KEY, failing, secrets=("hunter2-provider-key",))
        await summaries.wait(KEY)
    assert "background summarization failed" in caplog.text
    assert "provider said no" in caplog.text and "hunter2" not in caplog.text
    # The session's summary lock was given back: another process may summarize it.
    token = await parts.store.try_lock(*KEY, 60.0, name="summary")
    assert token is not None
    await parts.store.unlock(*KEY, token, name="summary")
