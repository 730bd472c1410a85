"""What only the disk store has to show: its tables, appends, TTL sweeps, processes."""

from __future__ import annotations

import asyncio
import multiprocessing
import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from proxy.errors import StoreUnavailable
from proxy.sessions.records import Commit
from proxy.sessions.stores import DiskSessionStore, TimedStore
from proxy.sessions.stores.disk import FILE
from proxy.sessions.stores.sqlite import Database
from tests.unit.sessions_factory import entries, meta
from tests.waiting import eventually_async


def rows(directory: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(directory / FILE) as connection:
        return connection.execute(query).fetchall()


async def test_sessions_messages_and_checkpoints_are_json_rows(tmp_path: Path) -> None:
    store = DiskSessionStore(str(tmp_path))
    transcript = entries("u1", "a1")
    assert await store.commit(Commit(meta(transcript), 0, 0, transcript))
    await store.close()
    sessions = rows(tmp_path, "SELECT tenant, session, version, length, meta FROM sessions")
    assert [row[:4] for row in sessions] == [("t1", "s", 1, 2)]
    assert orjson.loads(sessions[0][4])["length"] == 2
    messages = rows(tmp_path, "SELECT position, entry FROM messages ORDER BY position")
    assert [(p, orjson.loads(e)) for p, e in messages] == [
        (i, m.to_dict()) for i, m in enumerate(transcript)
    ]


async def test_a_turn_writes_only_its_new_messages_and_the_meta(tmp_path: Path) -> None:
    store = DiskSessionStore(str(tmp_path))
    transcript = entries(*(f"m{i}" for i in range(1000)))
    assert await store.commit(Commit(meta(transcript), 0, 0, transcript))
    with sqlite3.connect(tmp_path / FILE) as connection:  # every write, logged by SQLite
        connection.executescript(
            """
            CREATE TABLE written (what TEXT, position INTEGER);
            CREATE TRIGGER m_insert AFTER INSERT ON messages
              BEGIN INSERT INTO written VALUES ('insert', NEW.position); END;
            CREATE TRIGGER m_update AFTER UPDATE ON messages
              BEGIN INSERT INTO written VALUES ('update', NEW.position); END;
            CREATE TRIGGER m_delete AFTER DELETE ON messages
              BEGIN INSERT INTO written VALUES ('delete', OLD.position); END;
            CREATE TRIGGER s_write AFTER INSERT ON sessions
              BEGIN INSERT INTO written VALUES ('meta', NEW.length); END;
            CREATE TRIGGER s_update AFTER UPDATE ON sessions
              BEGIN INSERT INTO written VALUES ('meta', NEW.length); END;
            """
        )
    more = entries("u", "a", start=1000, head=transcript[-1].chain)
    assert await store.commit(Commit(meta([*transcript, *more], version=2), 1, 1000, more))
    await store.close()
    assert rows(tmp_path, "SELECT what, position FROM written") == [
        ("insert", 1000),
        ("insert", 1001),
        ("meta", 1002),
    ]


async def test_a_turn_of_many_rows_goes_in_whole_over_a_cut_transcript(tmp_path: Path) -> None:
    """Rows go in a few hundred a statement: every position once, in order, the cut
    ones replaced, the last statement a short one."""
    store = DiskSessionStore(str(tmp_path))
    old = entries(*(f"old {i}" for i in range(300)))
    assert await store.commit(Commit(meta(old), 0, 0, old))
    kept = old[:150]
    new = entries(*(f"new {i}" for i in range(451)), start=150, head=kept[-1].chain)
    assert await store.commit(Commit(meta([*kept, *new], version=2), 1, 150, new))
    stored = await store.messages("t1", "s", 0, 601)
    assert [m.message["content"] for m in stored] == [
        *(f"old {i}" for i in range(150)),
        *(f"new {i}" for i in range(451)),
    ]
    await store.close()
    assert rows(tmp_path, "SELECT count(*), max(position) FROM messages") == [(601, 600)]


async def test_a_commit_or_read_of_megabytes_runs_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A two-message turn is committed, and read back, on the event loop (cheaper than a
    thread hop); a 5 MB message on the worker thread, where SQLite lets the loop run."""
    on_loop: list[tuple[str, bool]] = []
    for name in ("commit", "entries"):
        method = getattr(Database, name)

        def spied(database: Database, *args: Any, _name: str = name, _method: Any = method) -> Any:
            on_loop.append((_name, threading.current_thread() is threading.main_thread()))
            return _method(database, *args)

        monkeypatch.setattr(Database, name, spied)
    store = DiskSessionStore(str(tmp_path))
    small = entries("u1", "a1")
    assert await store.commit(Commit(meta(small), 0, 0, small))
    large = entries("x" * 5_000_000, start=2, head=small[-1].chain)
    assert await store.commit(Commit(meta([*small, *large], version=2), 1, 2, large))
    assert await store.messages("t1", "s", 0, 2) == small
    assert await store.messages("t1", "s", 1, 3) == [small[1], *large]
    await store.close()
    assert on_loop == [("commit", True), ("commit", False), ("entries", False)]


async def test_reads_racing_writes_never_miss(tmp_path: Path) -> None:
    """A session being written is always readable: a miss would plan without it."""
    writer, reader = DiskSessionStore(str(tmp_path)), DiskSessionStore(str(tmp_path))
    transcript = entries("x" * 100_000)
    assert await writer.commit(Commit(meta(transcript), 0, 0, transcript))
    misses = 0

    async def write() -> None:
        nonlocal transcript
        for turn in range(40):
            more = entries(f"turn {turn}", start=len(transcript), head=transcript[-1].chain)
            grown = [*transcript, *more]
            assert await writer.commit(
                Commit(meta(grown, version=turn + 2), turn + 1, len(transcript), more)
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


async def test_an_idle_session_is_swept_with_its_messages(tmp_path: Path) -> None:
    store = DiskSessionStore(str(tmp_path), ttl_seconds=0.3)
    idle = entries("u", "a")
    assert await store.commit(Commit(meta(idle, session_id="idle"), 0, 0, idle))

    async def gone() -> bool:  # for readers at once, once the TTL passed
        return await store.load("t1", "idle") is None

    await eventually_async(gone, "the TTL to pass")
    live = entries("u0")
    assert await store.commit(Commit(meta(live, session_id="live"), 0, 0, live))
    for turn in range(1, 100):  # the hundredth commit sweeps
        more = entries(f"u{turn}", start=turn, head=live[-1].chain)
        grown = meta([*live, *more], session_id="live", version=turn + 1)
        assert await store.commit(Commit(grown, turn, turn, more))
        live = [*live, *more]
    await store.close()
    assert rows(tmp_path, "SELECT DISTINCT session FROM messages") == [("live",)]
    assert rows(tmp_path, "SELECT session FROM sessions") == [("live",)]


def _commit_from_a_process(directory: str, writer: int, start: Any) -> bool:
    async def run() -> bool:
        store = DiskSessionStore(directory)
        base = entries("u1", "a1")
        more = entries(f"writer {writer}", start=2, head=base[-1].chain)
        start.wait(60)  # every writer ready: they commit at once
        won = await store.commit(Commit(meta([*base, *more], version=2), 1, 2, more))
        await store.close()
        return won

    return anyio.run(run)


async def test_concurrent_commits_from_processes_one_winner(tmp_path: Path) -> None:
    store = DiskSessionStore(str(tmp_path))
    base = entries("u1", "a1")
    assert await store.commit(Commit(meta(base), 0, 0, base))
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(4) as pool:
        start = manager.Barrier(4)
        args: list[Any] = [(str(tmp_path), writer, start) for writer in range(4)]
        results = await anyio.to_thread.run_sync(pool.starmap, _commit_from_a_process, args)
    assert sum(results) == 1
    stored = await store.messages("t1", "s", 0, 3)
    assert stored[-1].message["content"] == f"writer {results.index(True)}"
    await store.close()


async def test_a_store_whose_directory_cannot_be_made_serves_once_it_can(tmp_path: Path) -> None:
    """A directory that cannot be created (here: a file stands in its way) is a fault of
    each request, a clear 503, not a crash at start; the store opens once it can."""
    blocker = tmp_path / "volume"
    blocker.write_text("not a directory")
    store = TimedStore(DiskSessionStore(str(blocker / "sessions")), "disk")
    for operation in (store.ping(), store.load("t1", "s")):
        with pytest.raises(StoreUnavailable) as raised:
            await operation
        assert raised.value.code == "store_unavailable"
    blocker.unlink()
    await store.ping()
    transcript = entries("u1", "a1")
    assert await store.commit(Commit(meta(transcript), 0, 0, transcript))
    await store.close()


async def test_too_little_free_space_is_found_before_a_turn(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    store = TimedStore(DiskSessionStore(str(tmp_path), min_free_bytes=free * 2), "disk")
    for check in (store.writable(), store.ping()):
        with pytest.raises(StoreUnavailable) as raised:
            await check
        assert "disk is full" in raised.value.message
    await store.close()
    roomy = TimedStore(DiskSessionStore(str(tmp_path), min_free_bytes=1), "disk")
    await roomy.writable()
    await roomy.close()


async def test_the_log_is_copied_into_the_database_beside_the_commits(tmp_path: Path) -> None:
    """No commit waits for a checkpoint; the store starts one after every few megabytes
    it commits, so the write-ahead log never grows without bound."""
    store = DiskSessionStore(str(tmp_path))
    text = "x" * 2000
    for number in range(3):
        transcript = entries(*(f"{number} {i} {text}" for i in range(1000)))  # 2+ MB each
        assert await store.commit(
            Commit(meta(transcript, session_id=f"s{number}"), 0, 0, transcript)
        )
    database = tmp_path / FILE

    async def copied() -> bool:
        return database.stat().st_size > 4 << 20

    await eventually_async(copied, "a checkpoint")
    # What was copied is what was committed, read by another connection.
    assert rows(tmp_path, "SELECT count(*) FROM messages") == [(3000,)]
    await store.close()
