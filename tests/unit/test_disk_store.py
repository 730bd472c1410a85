"""What only the disk store has to show: its layout, appends, TTL upkeep, processes."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from pathlib import Path
from typing import Any

import anyio
import diskcache
import orjson
import pytest

from proxy.stores import DiskSessionStore
from tests.unit.sessions_factory import entries, meta


async def test_values_are_json_not_pickle(tmp_path: Path) -> None:
    store = DiskSessionStore(str(tmp_path))
    transcript = entries("u1", "a1")
    assert await store.commit(meta(transcript), 0, 0, transcript)
    await store.close()
    with diskcache.Cache(str(tmp_path)) as cache:
        keys = sorted(cache.iterkeys())
        values = [cache.get(key) for key in keys]
    assert keys == ["m:t1:s:000000000000", "m:t1:s:000000000001", "s:t1:s"]
    assert all(isinstance(v, bytes) and orjson.loads(v) for v in values)


async def test_a_turn_writes_only_its_new_messages_and_the_meta(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DiskSessionStore(str(tmp_path))
    transcript = entries(*(f"m{i}" for i in range(1000)))
    assert await store.commit(meta(transcript), 0, 0, transcript)
    written: list[str] = []
    real = DiskSessionStore._set
    monkeypatch.setattr(
        DiskSessionStore,
        "_set",
        lambda self, cache, key, value: written.append(key) or real(self, cache, key, value),
    )
    more = entries("u", "a", start=1000, head=transcript[-1].chain)
    assert await store.commit(meta([*transcript, *more], version=2), 1, 1000, more)
    assert written == ["m:t1:s:000000001000", "m:t1:s:000000001001"]
    await store.close()


async def test_reads_racing_writes_never_miss(tmp_path: Path) -> None:
    """A session being written is always readable: a miss would plan without it."""
    writer, reader = DiskSessionStore(str(tmp_path)), DiskSessionStore(str(tmp_path))
    transcript = entries("x" * 100_000)
    assert await writer.commit(meta(transcript), 0, 0, transcript)
    misses = 0

    async def write() -> None:
        nonlocal transcript
        for turn in range(40):
            more = entries(f"turn {turn}", start=len(transcript), head=transcript[-1].chain)
            grown = [*transcript, *more]
            assert await writer.commit(
                meta(grown, version=turn + 2), turn + 1, len(transcript), more
            )
            transcript = grown

    async def read() -> None:
        nonlocal misses
        for _ in range(200):
            misses += await reader.load("t1", "s") is None

    await asyncio.gather(write(), read(), read())
    await writer.close()
    await reader.close()
    assert misses == 0


async def test_a_live_session_outlives_its_ttl_an_idle_one_does_not(tmp_path: Path) -> None:
    store = DiskSessionStore(str(tmp_path), ttl_seconds=0.4)
    transcript = entries("u0")
    assert await store.commit(meta(transcript), 0, 0, transcript)
    for turn in range(1, 8):  # 1.4 s of turns, each well within the TTL of the last
        await asyncio.sleep(0.2)
        more = entries(f"u{turn}", start=turn, head=transcript[-1].chain)
        assert await store.commit(meta([*transcript, *more], version=turn + 1), turn, turn, more)
        transcript = [*transcript, *more]
    assert await store.messages("t1", "s", 0, 8) == transcript  # the first message too
    await asyncio.sleep(1.0)
    assert await store.load("t1", "s") is None
    await store.close()


async def test_no_size_based_culling(tmp_path: Path) -> None:
    # A directory left with a 1 MB limit and LRU eviction: the store must override both.
    with diskcache.Cache(str(tmp_path), size_limit=2**20, eviction_policy="least-recently-used"):
        pass
    store = DiskSessionStore(str(tmp_path))
    for index in range(300):  # ~30 MB
        transcript = entries("y" * 100_000)
        assert await store.commit(meta(transcript, session_id=str(index)), 0, 0, transcript)
    for index in range(300):
        assert await store.load("t1", str(index)) is not None, index
    assert await store.ping()
    await store.close()


def _commit_from_a_process(directory: str, writer: int, start_at: float) -> bool:
    async def run() -> bool:
        store = DiskSessionStore(directory)
        base = entries("u1", "a1")
        more = entries(f"writer {writer}", start=2, head=base[-1].chain)
        while time.time() < start_at:
            await anyio.sleep(0.001)
        won = await store.commit(meta([*base, *more], version=2), 1, 2, more)
        await store.close()
        return won

    return anyio.run(run)


async def test_concurrent_commits_from_processes_one_winner(tmp_path: Path) -> None:
    store = DiskSessionStore(str(tmp_path))
    base = entries("u1", "a1")
    assert await store.commit(meta(base), 0, 0, base)
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 2.0
    with context.Pool(4) as pool:
        args: list[Any] = [(str(tmp_path), writer, start_at) for writer in range(4)]
        results = await anyio.to_thread.run_sync(pool.starmap, _commit_from_a_process, args)
    assert sum(results) == 1
    stored = await store.messages("t1", "s", 0, 3)
    assert stored[-1].message["content"] == f"writer {results.index(True)}"
    await store.close()
