"""The part of a session its summary covers, kept searchable (`Archive`): the session
search finds what was said whether a summary covers it or not, and the archive is read
from the checkpoints fold by fold, never again from the start."""

from __future__ import annotations

import random
import tracemalloc
from typing import Any

import pytest

from proxy.engine import archive as archive_module
from proxy.recall.index import RecallIndex, segment
from tests.unit.engines import Parts, conversation


def said(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def echo(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": f"echo: {text}"}


EARLY = "The staging database lives on host kestrel-7 behind the bastion."
LATE = "The release train leaves on Thursday with build 5521."


async def long_session(parts: Parts) -> list[dict[str, Any]]:
    """EARLY, then enough turns for summaries to cover it, then LATE, unsummarized."""
    history = [said(EARLY), echo(EARLY), *conversation(5), said(LATE), echo(LATE)]
    for end in range(2, len(history) + 1, 2):
        await parts.turn(history[: end - 1])
    return history


async def test_the_session_search_finds_summarized_and_recent_messages(
    make_parts: Any,
) -> None:
    parts = make_parts(window=1000)
    history = await long_session(parts)
    meta = await parts.store.load("t1", "s")
    assert meta is not None and meta.checkpoint is not None
    assert meta.checkpoint.covers_until >= 2  # EARLY is summarized
    assert meta.checkpoint.covers_until <= len(history) - 2  # LATE is not
    archive = parts.engine.archive
    for text, query in ((EARLY, "which host is the staging database on"), (LATE, "build 5521")):
        found = await archive.search(("t1", "s"), meta, query, 3)
        assert found, query
        hit, messages = found[0]
        assert any(text in str(m["content"]) for m in messages), (query, messages)
        assert history[hit.start : hit.end] == messages
    assert await archive.search(("t1", "s"), meta, "nothing like this anywhere", 3) == []


async def test_the_archive_is_extended_fold_by_fold(make_parts: Any) -> None:
    parts = make_parts(window=1000)
    await long_session(parts)
    reads: list[int] = []
    checkpoints = parts.store.checkpoints

    async def counted(tenant: str, session: str, start: int = 0) -> Any:
        reads.append(start)
        return await checkpoints(tenant, session, start)

    parts.store.checkpoints = counted
    archive, key = parts.engine.archive, ("t1", "s")
    meta = await parts.store.load(*key)
    assert meta is not None and meta.checkpoint is not None
    first = await archive.as_of(key, meta.checkpoints, meta.checkpoint)
    assert first.count == meta.checkpoints
    again = await archive.as_of(key, meta.checkpoints, meta.checkpoint)
    assert again is first  # cached: nothing read
    # A new fold (another turn past the budget): only the checkpoints after it are read.
    history = [said(EARLY), echo(EARLY), *conversation(5), said(LATE), echo(LATE)]
    reads.clear()
    await parts.turn([*history, *conversation(2, tag="more")[:1]])
    newer = await parts.store.load(*key)
    assert newer is not None and newer.checkpoints > meta.checkpoints
    # The archive as it was before the fold (the turn's own fold extended it in place).
    assert (await archive.as_of(key, meta.checkpoints, meta.checkpoint)).count == first.count
    reads.clear()
    extended = await archive.as_of(key, newer.checkpoints, newer.checkpoint)
    assert extended.count == newer.checkpoints
    # Read on from the first checkpoint it had not read, never again from the start.
    assert reads and all(start >= meta.checkpoints for start in reads)
    assert set(first.index.units) <= set(extended.index.units)


async def test_the_archives_kept_are_bounded_by_what_their_indexes_hold(
    make_parts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process keeps archives within `_KEPT_BYTES` however few sessions they are: the
    least recently used goes first, and is read again from the store when asked for."""
    parts = make_parts(window=1000)
    await long_session(parts)
    archive, key = parts.engine.archive, ("t1", "s")
    meta = await parts.store.load(*key)
    assert meta is not None and meta.checkpoint is not None
    first = await archive.as_of(key, meta.checkpoints, meta.checkpoint)
    assert first.index.size > 0
    monkeypatch.setattr(archive_module, "_KEPT_BYTES", first.index.size)
    other = ("t1", "other")
    archive._remember(other, first)  # a second session's, as large: over the bound
    assert list(archive._cache) == [other]
    assert await archive.as_of(key, meta.checkpoints, meta.checkpoint) is not first  # read again
    monkeypatch.setattr(archive_module, "_KEPT_BYTES", 4 * first.index.size)
    archive._remember(other, first)
    assert list(archive._cache) == [key, other]  # both within the bound


def test_an_index_says_what_it_holds() -> None:
    """`RecallIndex.size`, what the archive's bound weighs, within a fifth of what the
    index allocated, as it is extended."""
    rng = random.Random(52)
    words = [f"w{n}" for n in range(20_000)]
    text = [" ".join(rng.choice(words) for _ in range(40)) for _ in range(4_000)]
    parts = [segment(0, list(map(said, text)), ""), segment(4_000, list(map(echo, text)), "")]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        index = RecallIndex().extended(parts[:1])
        grown = index.extended(parts[1:])
        del index
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 0.8 < grown.size / held < 1.2, (grown.size, held)


async def test_a_block_fills_its_room_when_more_units_match_than_it_used_to_offer(
    make_parts: Any,
) -> None:
    """A question that two hundred short notes (and their echoes) all answer: the block
    takes as many as its room holds (more than the 76 it was once offered), read until
    they would surely fill it, not all of them."""
    parts = make_parts(window=8000)
    notes = [said(f"garden note {n}: planted row {n}") for n in range(200)]
    history = [m for note in notes for m in (note, echo(str(note["content"])))]
    history += conversation(12)
    for end in range(2, len(history) + 1, 20):
        await parts.turn(history[: end - 1])
    reads: list[tuple[int, int]] = []
    messages = parts.store.messages

    async def counted(tenant: str, session: str, start: int, end: int) -> Any:
        reads.append((start, end))
        return await messages(tenant, session, start, end)

    parts.store.messages = counted
    shown = await parts.preview([*history, said("what did I plant in the garden?")])
    block = next(m["content"] for m in shown["messages"] if "Recalled" in str(m["content"]))
    units = block.count("garden note")
    assert units > 76
    assert len(reads) < 2 * units  # of the 212 offered
