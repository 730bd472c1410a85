"""Agents that compact their own history (`proxy.engine.folds.chapters.Chapters`), on the
real engine and disk store: a client that goes on from its own summary (Claude Code's
`/compact`) starts a chapter, so its window starts at its new conversation while the old
one stays stored and recallable, with no model call; and an agent's request for a
summary is answered from the session's own summary, with no model call, where that
summary covers all but the latest messages."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from proxy.engine.types import Request, RequestContext, SessionView
from proxy.recall.index import RECALL_PREFIX
from proxy.sessions.records import StoredMessage
from proxy.summary.fold import render_transcript
from tests.unit.engines import MODEL, Parts, conversation

Message = dict[str, Any]
SYSTEM = {"role": "system", "content": "You are a careful assistant."}
PLANTED = "For the record: the vault code is 4471-ZETA and Ines Moreau keeps it."
# Claude Code's request for a summary, and the opening of the conversation it goes on with.
COMPACT = "Your task is to create a detailed summary of the conversation so far, paying"
RESUMED = (
    "This session is being continued from a previous conversation that ran out of"
    " context. The conversation is summarized below: the user planned a trip."
)


def said(text: str) -> Message:
    return {"role": "user", "content": text}


def echo(text: str) -> Message:
    return {"role": "assistant", "content": f"echo: {text}"}


def reads(parts: Parts) -> list[tuple[int, int]]:
    """The ranges of stored messages read from now on."""
    ranges: list[tuple[int, int]] = []
    messages = parts.store.messages

    async def counted(tenant: str, session_id: str, start: int, end: int) -> list[StoredMessage]:
        ranges.append((start, end))
        return await messages(tenant, session_id, start, end)

    parts.store.messages = counted  # type: ignore[method-assign]
    return ranges


async def facts(parts: Parts, messages: list[Message]) -> tuple[Request, SessionView]:
    """The request for `messages` and the session as it leaves it."""
    context = RequestContext(tenant="t1", session_id="s")
    body = {"model": MODEL, "messages": messages}
    request = await parts.engine.parts.intake.request(body, context)
    return request, await parts.engine.parts.history.state(request)


async def resent_session(parts: Parts) -> list[Message]:
    """Two turns of a client that resends its whole conversation, then its request for
    a summary (answered by the model, never stored): what Claude Code's /compact does."""
    history = [SYSTEM, said(PLANTED)]
    await parts.turn(history)
    history += [echo(PLANTED), said("and the budget?")]
    await parts.turn(history)
    history.append(echo("and the budget?"))
    compacting = await parts.turn([*history, said(COMPACT)])
    assert compacting.side_request and len(await parts.stored()) == 4
    return history


async def test_a_clients_own_compaction_starts_a_chapter_with_its_new_conversation(
    parts: Parts,
) -> None:
    old = await resent_session(parts)
    chapter = [SYSTEM, said(RESUMED), said("go on")]
    turn = await parts.turn(chapter)
    assert turn.state is not None and turn.state.match.kind == "chapter"
    assert parts.upstream.sent[-1]["messages"] == chapter  # none of the old conversation
    assert parts.upstream.summaries == []  # the client's summary is its own: no model call
    assert await parts.stored() == [*old[1:], *chapter[1:], echo("go on")]  # the old stays
    meta = await parts.store.load("t1", "s")
    assert meta is not None and meta.origin == 4  # the client's conversation starts there
    [checkpoint] = await parts.store.checkpoints("t1", "s")
    assert (checkpoint.covers_until, checkpoint.segments, checkpoint.text) == (4, (), "")
    # Its next turn goes on in the chapter: the old conversation is not sent again.
    later = [*chapter, echo("go on"), said("and then?")]
    turn = await parts.turn(later)
    assert turn.state is not None and turn.state.match.kind == "full"
    assert parts.upstream.sent[-1]["messages"] == later


async def test_the_conversation_before_a_chapter_is_recalled_when_asked_about(
    parts: Parts,
) -> None:
    await resent_session(parts)
    chapter = [SYSTEM, said(RESUMED), said("go on")]
    await parts.turn(chapter)
    await parts.turn([*chapter, echo("go on"), said("Who keeps the vault code?")])
    sent = parts.upstream.sent[-1]["messages"]
    [recalled] = [m for m in sent if str(m["content"]).startswith(RECALL_PREFIX)]
    assert PLANTED in recalled["content"]
    assert sent[-1] == said("Who keeps the vault code?")


async def summarized_session(parts: Parts) -> list[Message]:
    """Four long exchanges sent turn by turn on a small window: summaries made ahead."""
    history = conversation(4)
    for end in range(2, len(history) + 1, 2):
        await parts.turn(history[: end - 1])
    meta = await parts.store.load("t1", "s")
    assert meta is not None and meta.checkpoint is not None and meta.checkpoint.text
    return history


async def test_a_chapter_covers_the_whole_transcript_and_archives_what_follows_the_summary(
    make_parts: Callable[..., Parts],
) -> None:
    parts = make_parts(window=1000)
    history = await summarized_session(parts)
    meta = await parts.store.load("t1", "s")
    assert meta is not None and meta.checkpoint is not None
    covered = meta.checkpoint.covers_until
    request, state = await facts(parts, [said(RESUMED), said("go on")])
    assert state.match.kind == "chapter" and state.kept == 8
    summaries, ranges = len(parts.upstream.summaries), reads(parts)
    chaptered = await parts.engine.parts.chapters.chapter(request, state)
    checkpoint = chaptered.checkpoint
    assert checkpoint is not None and chaptered.pending is checkpoint  # stored with the turn
    assert (checkpoint.covers_until, checkpoint.text) == (8, "")
    stored = await parts.store.messages("t1", "s", 0, 8)
    assert checkpoint.chain_hash == stored[-1].chain  # pinned to the transcript it covers
    assert checkpoint.before == meta.totals
    assert chaptered.checkpoints == meta.checkpoints + 1
    assert ranges[0] == (covered, 8)  # what the summary left, read for the archive
    assert checkpoint.index is not None  # archived for recall
    assert len(parts.upstream.summaries) == summaries  # no model call
    assert [s.message for s in stored] == history


async def test_an_agents_request_for_a_summary_is_answered_from_the_sessions_own(
    make_parts: Callable[..., Parts],
) -> None:
    parts = make_parts(window=1000)
    history = await summarized_session(parts)
    meta = await parts.store.load("t1", "s")
    assert meta is not None and meta.checkpoint is not None
    covered, text = meta.checkpoint.covers_until, meta.checkpoint.text
    summaries, sent = len(parts.upstream.summaries), len(parts.upstream.sent)
    turn = await parts.turn([*history, said(COMPACT)])
    assert turn.side_request and turn.answer is not None and turn.tokens_sent == 0
    answer = turn.answer["choices"][0]["message"]["content"]
    latest = render_transcript(history[covered:])  # the messages after it, as they were
    assert answer == f"{text}\n\nThe latest messages, as they were:\n\n{latest}"
    assert (len(parts.upstream.summaries), len(parts.upstream.sent)) == (summaries, sent)
    assert await parts.stored() == history  # answered, not stored


async def test_a_summary_that_leaves_too_much_unsaid_is_not_the_answer(
    make_parts: Callable[..., Parts],
) -> None:
    """The summary answers where what follows it (the request aside) is at most
    `max_summary_tokens` (1024 by default): else the model must write the summary."""
    parts = make_parts(window=1000)
    history = await summarized_session(parts)
    request, state = await facts(parts, [*history, said(COMPACT)])
    assert state.checkpoint is not None
    name = request.counter.name
    covered, asked = state.checkpoint.before[name], state.new[-1].tokens[name]
    chapters = parts.engine.parts.chapters
    at_most = replace(state, totals={name: covered + 1024 + asked})
    assert await chapters.answer(request, at_most) is not None
    over = replace(state, totals={name: covered + 1025 + asked})
    assert await chapters.answer(request, over) is None


async def test_no_answer_without_a_summary_of_the_sessions_own(
    parts: Parts, make_parts: Callable[..., Parts]
) -> None:
    # No summary yet.
    history = await resent_session(parts)
    request, state = await facts(parts, [*history, said(COMPACT)])
    assert await parts.engine.parts.chapters.answer(request, state) is None
    # A chapter's checkpoint is the client's own summary, which the proxy never read.
    chapter = [SYSTEM, said(RESUMED), said("go on")]
    await parts.turn(chapter)
    request, state = await facts(parts, [*chapter, echo("go on"), said(COMPACT)])
    assert state.checkpoint is not None and state.checkpoint.text == ""
    assert await parts.engine.parts.chapters.answer(request, state) is None
    # Answering is switched off: the model writes it, though a summary would do.
    off = make_parts(window=1000, context={"answer_compaction": False})
    history = await summarized_session(off)
    sent = len(off.upstream.sent)
    turn = await off.turn([*history, said(COMPACT)])
    assert turn.answer is None and turn.side_request
    assert len(off.upstream.sent) == sent + 1
