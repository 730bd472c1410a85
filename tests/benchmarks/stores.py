"""Store latency as a session grows: what a turn costs the store at 10, 1,000 and 10,000
stored messages, for the disk store and for Redis (a redis-server of its own).

A turn loads the meta (all a full-resend request within budget reads) and commits its
two new messages; a window read (the 20 messages after a summary) is shown beside it.
All three should stay flat: the target is at most 1.5x from 10 to 10,000 messages.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from proxy.sessions.records import SessionMeta, StoredMessage
from proxy.sessions.store import SessionStore
from proxy.sessions.stores.disk import DiskSessionStore
from proxy.sessions.stores.redis import RedisSessionStore
from tests.redis_servers import redis_server
from tests.unit.sessions_factory import entries, meta

SIZES = (10, 1_000, 10_000)
_BATCH = 1_000  # messages per commit while filling a session


async def fill(store: SessionStore, session: str, size: int) -> SessionMeta:
    """A session of `size` messages, written a thousand at a time."""
    transcript = entries("m0")
    current = meta(transcript, session_id=session)
    assert await store.commit(current, 0, 0, transcript)
    while current.length < size:
        count = min(_BATCH, size - current.length)
        texts = [f"message {current.length + i}" for i in range(count)]
        more = entries(*texts, start=current.length, head=current.head)
        grown = _grown(current, more)
        assert await store.commit(grown, current.version, current.length, more)
        current = grown
    return current


def _grown(current: SessionMeta, more: list[StoredMessage]) -> SessionMeta:
    return current.evolve(
        version=current.version + 1, length=current.length + len(more), head=more[-1].chain
    )


async def turns(store: SessionStore, session: str, count: int) -> tuple[list[float], list[float]]:
    """Time `count` turns (load + commit of two messages) and window reads."""
    turn_times, read_times = [], []
    for _ in range(count):
        started = time.perf_counter()
        loaded = await store.load("t1", session)
        assert loaded is not None
        more = entries("user", "reply", start=loaded.length, head=loaded.head)
        assert await store.commit(_grown(loaded, more), loaded.version, loaded.length, more)
        turn_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        end = loaded.length + 2
        await store.messages("t1", session, max(0, end - 20), end)
        read_times.append(time.perf_counter() - started)
    return turn_times, read_times


def report(rows: dict[str, dict[int, tuple[float, float]]]) -> str:
    lines = [f"{'store':6} {'messages':>9} {'load+append ms':>15} {'read 20 ms':>11}"]
    for name, sizes in rows.items():
        for size, (turn, read) in sizes.items():
            lines.append(f"{name:6} {size:>9} {turn * 1e3:15.3f} {read * 1e3:11.3f}")
    lines.append("")
    for name, sizes in rows.items():
        small, large = sizes[min(sizes)], sizes[max(sizes)]
        lines.append(
            f"{name}: load+append {large[0] / small[0]:.2f}x and window read "
            f"{large[1] / small[1]:.2f}x from {min(sizes)} to {max(sizes)} messages "
            f"(target: at most 1.5x)"
        )
    return "\n".join(lines)


async def benchmark(count: int = 200, sizes: tuple[int, ...] = SIZES) -> str:
    """Every session is filled first (so each size meets the same database), then the
    sizes and stores take turns in rounds, so drift hits them alike."""
    times: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
    with tempfile.TemporaryDirectory() as directory, redis_server() as url:
        stores: dict[str, SessionStore] = {
            "disk": DiskSessionStore(str(Path(directory))),
            "redis": RedisSessionStore(url, prefix="bench"),
        }
        for name, store in stores.items():
            for size in sizes:
                await fill(store, f"bench-{size}", size)
                times[(name, size)] = ([], [])
        for _ in range(10):
            for size in sizes:
                for name, store in stores.items():
                    turn, read = await turns(store, f"bench-{size}", max(1, count // 10))
                    times[(name, size)][0].extend(turn)
                    times[(name, size)][1].extend(read)
        for store in stores.values():
            await store.close()
    rows: dict[str, dict[int, tuple[float, float]]] = {name: {} for name in ("disk", "redis")}
    for (name, size), (turn, read) in times.items():
        rows[name][size] = (statistics.median(turn), statistics.median(read))
    return report(rows)


if __name__ == "__main__":
    print(asyncio.run(benchmark()))
