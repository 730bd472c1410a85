from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import diskcache
import pytest

from proxy.stores import DiskSessionStore
from tests.unit.sessions_factory import make_session, next_version


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[DiskSessionStore]:
    store = DiskSessionStore(str(tmp_path), ttl_seconds=None)
    yield store
    await store.close()


async def test_roundtrip_is_json_not_pickle(store: DiskSessionStore, tmp_path: Path) -> None:
    session = make_session()
    assert await store.get("t1", "s") is None
    assert await store.put(session, expected_version=0)
    assert await store.get("t1", "s") == session
    with diskcache.Cache(str(tmp_path)) as raw_cache:
        raw = raw_cache.get("t1:s")
    assert isinstance(raw, bytes) and raw.startswith(b"{")


async def test_large_session_roundtrip(store: DiskSessionStore) -> None:
    session = make_session(text="x" * 200_000)  # above diskcache's default file threshold
    assert await store.put(session, 0)
    assert await store.put(next_version(session, "more"), 1)
    loaded = await store.get("t1", "s")
    assert loaded is not None and loaded.version == 2 and len(loaded.transcript) == 3


async def test_reads_racing_writes_never_miss_a_large_session(tmp_path: Path) -> None:
    """A session being rewritten is always readable: a miss would make the proxy plan
    without its summary checkpoints."""
    writer = DiskSessionStore(str(tmp_path))
    reader = DiskSessionStore(str(tmp_path))
    session = make_session(text="x" * 100_000)
    assert await writer.put(session, 0)
    misses = 0

    async def write() -> None:
        current = session
        for round_ in range(40):
            following = next_version(current, f"turn {round_}")
            assert await writer.put(following, current.version)
            current = following

    async def read() -> None:
        nonlocal misses
        for _ in range(200):
            misses += await reader.get("t1", "s") is None

    await asyncio.gather(write(), read(), read())
    await writer.close()
    await reader.close()
    assert misses == 0


async def test_ttl_expiry(tmp_path: Path) -> None:
    store = DiskSessionStore(str(tmp_path), ttl_seconds=0.3)
    assert await store.put(make_session(), 0)
    assert await store.get("t1", "s") is not None
    await anyio.sleep(0.5)
    assert await store.get("t1", "s") is None
    assert await store.put(make_session(), 0)  # expired counts as absent
    await store.close()


async def test_no_size_based_culling(tmp_path: Path) -> None:
    # A directory left with a 1 MB limit and LRU-style eviction: the store must override both.
    with diskcache.Cache(str(tmp_path), size_limit=2**20, eviction_policy="least-recently-used"):
        pass
    store = DiskSessionStore(str(tmp_path), ttl_seconds=None)
    big = "y" * 100_000
    for index in range(300):  # ~30 MB
        assert await store.put(make_session(session_id=str(index), text=big), 0)
    for index in range(300):
        assert await store.get("t1", str(index)) is not None, index
    assert await store.ping()
    await store.close()


async def test_concurrent_puts_from_threads_one_winner_per_version(tmp_path: Path) -> None:
    stores = [DiskSessionStore(str(tmp_path), ttl_seconds=None) for _ in range(4)]
    base = make_session()
    assert await stores[0].put(base, 0)
    for version in range(1, 6):
        candidates = [next_version(base, f"writer {i}") for i in range(8)]
        results = await asyncio.gather(
            *(stores[i % 4].put(c, version) for i, c in enumerate(candidates))
        )
        assert sum(results) == 1
        stored = await stores[0].get("t1", "s")
        assert stored == candidates[results.index(True)]
        base = stored
    for store in stores:
        await store.close()


def _process_put(directory: str, writer: int, start_at: float) -> bool:
    async def run() -> bool:
        store = DiskSessionStore(directory, ttl_seconds=None)
        session = next_version(make_session(), f"writer {writer}")
        while time.time() < start_at:
            await anyio.sleep(0.001)
        won = await store.put(session, expected_version=1)
        await store.close()
        return won

    return anyio.run(run)


async def test_concurrent_puts_from_processes_one_winner(tmp_path: Path) -> None:
    store = DiskSessionStore(str(tmp_path), ttl_seconds=None)
    assert await store.put(make_session(), 0)
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 2.0
    with context.Pool(4) as pool:
        args = [(str(tmp_path), writer, start_at) for writer in range(4)]
        results = await anyio.to_thread.run_sync(pool.starmap, _process_put, args)
    assert sum(results) == 1
    stored = await store.get("t1", "s")
    assert stored is not None and stored.version == 2
    winner = results.index(True)
    assert stored.transcript[-1].message["content"] == f"writer {winner}"
    await store.close()
