"""The disk store's tables as earlier releases made them (WITHOUT ROWID, where one large
message slowed every insert and read beside it): served as they are while they cannot
be converted, converted as the store opens, and never lost to a process killed while
converting them."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import orjson

from proxy.sessions.records import Commit
from proxy.sessions.stores import DiskSessionStore
from proxy.sessions.stores.disk import FILE
from tests.unit.sessions_factory import checkpoint, entries, meta

ROOT = Path(__file__).parents[2]

# The schema of the releases before the rowid tables, as they made it.
EARLIER = """
PRAGMA journal_mode=WAL;
CREATE TABLE sessions (
    tenant TEXT NOT NULL, session TEXT NOT NULL, version INTEGER NOT NULL,
    length INTEGER NOT NULL, checkpoints INTEGER NOT NULL, expires REAL,
    meta BLOB NOT NULL, PRIMARY KEY (tenant, session)
) WITHOUT ROWID;
CREATE INDEX sessions_expires ON sessions (expires) WHERE expires IS NOT NULL;
CREATE TABLE messages (
    tenant TEXT NOT NULL, session TEXT NOT NULL, position INTEGER NOT NULL,
    entry BLOB NOT NULL, PRIMARY KEY (tenant, session, position)
) WITHOUT ROWID;
CREATE TABLE checkpoints (
    tenant TEXT NOT NULL, session TEXT NOT NULL, position INTEGER NOT NULL,
    entry BLOB NOT NULL, PRIMARY KEY (tenant, session, position)
) WITHOUT ROWID;
CREATE TABLE plans (
    tenant TEXT NOT NULL, session TEXT NOT NULL, version INTEGER NOT NULL,
    entry BLOB NOT NULL, PRIMARY KEY (tenant, session, version)
) WITHOUT ROWID;
CREATE TABLE inserts (
    tenant TEXT NOT NULL, session TEXT NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (tenant, session)
) WITHOUT ROWID;
CREATE TABLE memories (
    tenant TEXT NOT NULL, memory TEXT NOT NULL, version INTEGER NOT NULL,
    data BLOB NOT NULL, PRIMARY KEY (tenant, memory)
) WITHOUT ROWID;
"""
TABLES = ("sessions", "messages", "checkpoints", "plans", "inserts", "memories")


def earlier_store(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(directory / FILE) as connection:
        connection.executescript(EARLIER)


def without_rowid(directory: Path) -> list[str]:
    """The store's tables still in the earlier layout."""
    with sqlite3.connect(directory / FILE) as connection:
        found = connection.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
        return sorted(name for name, sql in found if name in TABLES and "WITHOUT ROWID" in sql)


def contents(directory: Path) -> dict[str, list[str]]:
    """Every row of every table, as digests."""
    with sqlite3.connect(directory / FILE) as connection:
        return {
            table: sorted(
                hashlib.sha256(repr(row).encode()).hexdigest()
                for row in connection.execute(f"SELECT * FROM {table}")
            )
            for table in TABLES
        }


async def fill(store: DiskSessionStore) -> None:
    """Two sessions with everything a session has (one with a TTL), and a memory."""
    for session in ("a", "b"):
        transcript = entries(*(f"{session} {i}" for i in range(30)))
        summary = checkpoint(transcript, 10)
        stored = meta(transcript, session_id=session, checkpoints=[summary])
        plan, inserts = b'{"plan": "' + session.encode() + b'"}', b'{"inserts": 1}'
        assert await store.commit(Commit(stored, 0, 0, transcript, [summary], None, plan, inserts))
    assert await store.put_memory("t1", "m", 0, b'{"facts": []}')


async def test_an_earlier_layout_is_served_as_it_is_until_it_is_converted(tmp_path: Path) -> None:
    earlier_store(tmp_path)
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    cramped = DiskSessionStore(str(tmp_path), ttl_seconds=3600, min_free_bytes=free)
    await fill(cramped)  # no room to convert: the earlier tables serve, reads and writes
    assert [m.message["content"] for m in await cramped.messages("t1", "b", 28, 30)] == [
        "b 28",
        "b 29",
    ]
    await cramped.close()
    assert without_rowid(tmp_path) == sorted(TABLES)
    before = contents(tmp_path)

    store = DiskSessionStore(str(tmp_path))
    assert without_rowid(tmp_path) == []
    assert contents(tmp_path) == before
    loaded = await store.load("t1", "a")
    assert loaded is not None and loaded.length == 30
    assert len(await store.messages("t1", "a", 0, 30)) == 30
    assert [c.covers_until for c in await store.checkpoints("t1", "a")] == [10]
    assert await store.plans("t1", "a") == [b'{"plan": "a"}']
    assert await store.inserts("t1", "b") == b'{"inserts": 1}'
    assert await store.memory("t1", "m") == (1, b'{"facts": []}')
    more = entries("a 30", start=30, head=loaded.head)
    grown = loaded.evolve(version=2, length=31, head=more[-1].chain)
    assert await store.commit(Commit(grown, 1, 30, more))
    await store.close()
    with sqlite3.connect(tmp_path / FILE) as connection:
        indexes = connection.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        assert "sessions_expires" in {name for (name,) in indexes}


CONVERT = """
import sys
from proxy.sessions.stores import DiskSessionStore
DiskSessionStore(sys.argv[1])
"""


def test_a_process_killed_while_converting_loses_nothing(tmp_path: Path) -> None:
    """The conversion is one transaction: killed (-9) while it copies, the earlier
    tables stay whole and serve; the next start converts them."""
    earlier_store(tmp_path)
    transcript = entries(*(f"{i} " + "x" * 1_000_000 for i in range(96)))  # ~96 MB
    with sqlite3.connect(tmp_path / FILE) as connection:
        connection.executemany(
            "INSERT INTO messages VALUES ('t1', 's', ?, ?)",
            [(i, orjson.dumps(m.to_dict())) for i, m in enumerate(transcript)],
        )
        connection.execute(
            "INSERT INTO sessions VALUES ('t1', 's', 1, 96, 0, NULL, ?)",
            (orjson.dumps(meta(transcript).to_dict()),),
        )
    before = contents(tmp_path)
    log = tmp_path / f"{FILE}-wal"
    process = subprocess.Popen([sys.executable, "-c", CONVERT, str(tmp_path)], cwd=ROOT)
    deadline = time.monotonic() + 60
    while not (log.exists() and log.stat().st_size > 16 << 20):  # a sixth of the copy
        assert process.poll() is None, "the conversion ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.002)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert without_rowid(tmp_path) == sorted(TABLES)
    assert contents(tmp_path) == before

    subprocess.run([sys.executable, "-c", CONVERT, str(tmp_path)], cwd=ROOT, check=True)
    assert without_rowid(tmp_path) == []
    assert contents(tmp_path) == before
