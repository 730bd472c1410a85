"""Store latency as a session grows: what a turn costs the store at 10, 1,000 and 10,000
stored messages, for the disk store and for Redis (a redis-server of its own).

A turn loads the meta (all a full-resend request within budget reads) and commits its
two new messages; a window read (the 20 messages after a summary) is shown beside it.
All three should stay flat: the target is at most 1.5x from 10 to 10,000 messages.

Then turns of megabytes (issue 51): a 5 MB message, a turn of 2,000 messages whose keys
come just before it (on the disk store's earlier tables they read it whole, each), the
87,381 messages of the fuzz's case 3751 and reading them back; each with the longest
the event loop was held meanwhile (the target: what a small turn holds it, not the
turn's size).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from proxy.sessions.records import Commit, SessionMeta, StoredMessage
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
    assert await store.commit(Commit(current, 0, 0, transcript))
    while current.length < size:
        count = min(_BATCH, size - current.length)
        texts = [f"message {current.length + i}" for i in range(count)]
        more = entries(*texts, start=current.length, head=current.head)
        grown = _grown(current, more)
        assert await store.commit(Commit(grown, current.version, current.length, more))
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
        assert await store.commit(Commit(_grown(loaded, more), loaded.version, loaded.length, more))
        turn_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        end = loaded.length + 2
        await store.messages("t1", session, max(0, end - 20), end)
        read_times.append(time.perf_counter() - started)
    return turn_times, read_times


async def held(work: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """`work`'s seconds, and the longest the event loop went without a turn meanwhile."""
    longest, done = 0.0, False

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            longest, last = max(longest, now - last), now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    started = time.perf_counter()
    try:
        await work()
    finally:
        done = True
        await task
    return time.perf_counter() - started, longest


async def huge(name: str, store: SessionStore, quick: bool) -> list[str]:
    """What turns of megabytes cost `store`, and the event loop beside it."""
    size, beside, many = (1_000_000, 500, 5_000) if quick else (5_000_000, 2_000, 87_381)
    big = entries("x" * size)
    close = entries(*(f"hello {i}" for i in range(beside)))
    lots = entries(*(f"weather in city {i}?" for i in range(many)))

    def commit(session: str, stored: list[StoredMessage]) -> Callable[[], Awaitable[bool]]:
        return lambda: store.commit(Commit(meta(stored, session_id=session), 0, 0, stored))

    turns = {  # "huge-a" sorts just before "huge-b"
        f"a {size / 1e6:.0f} MB message": commit("huge-b", big),
        f"{beside:,} messages beside it": commit("huge-a", close),
        f"{many:,} messages": commit("huge-c", lots),
        f"reading the {many:,} back": lambda: store.messages("t1", "huge-c", 0, many),
        "two messages": commit("huge-d", entries("u", "a")),
    }
    lines = []
    for what, work in turns.items():
        try:
            seconds, longest = await held(work)
        except Exception as exc:  # a store past its deadline, say: what this is here for
            lines.append(f"{name:6} {what:28} failed: {type(exc).__name__}")
            continue
        lines.append(
            f"{name:6} {what:28} {seconds * 1e3:9.1f} ms,"
            f" the loop held at most {longest * 1e3:6.1f} ms"
        )
    return lines


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


async def benchmark(count: int = 200, sizes: tuple[int, ...] = SIZES, quick: bool = False) -> str:
    """Every session is filled first (so each size meets the same database), then the
    sizes and stores take turns in rounds, so drift hits them alike; then the turns of
    megabytes, on each store."""
    times: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
    megabytes: list[str] = []
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
        for name, store in stores.items():
            megabytes += await huge(name, store, quick)
            await store.close()
    rows: dict[str, dict[int, tuple[float, float]]] = {name: {} for name in ("disk", "redis")}
    for (name, size), (turn, read) in times.items():
        rows[name][size] = (statistics.median(turn), statistics.median(read))
    return report(rows) + "\n\nturns of megabytes:\n" + "\n".join(megabytes)


if __name__ == "__main__":
    print(asyncio.run(benchmark()))
