"""SQLite, the disk store's engine: the schema, and one connection's operations.

Five tables, append-only in use: `sessions` (one row per session: its meta record and
version), `messages` and `checkpoints` (one row each, keyed by position), `plans` (a
turn's plan record, keyed by the version it stored; the newest `PLANS_KEPT` kept),
`inserts` (a session's `Inserts`, replaced when a turn changes them); rowid tables,
their keys in indexes of their own, so a row of megabytes is read only when asked for
(`TABLES`; those of earlier releases are converted once). A commit is one transaction
of a handful of statements (about 0.15 ms for a two-message turn here, where the same
writes through diskcache's key-value API took 0.36 ms), and a window is one range query.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from proxy.sessions.records import PLANS_KEPT, LateCommit

__all__ = ["Busy", "Database", "Row"]

Row = tuple[Any, ...]
Busy = sqlite3.OperationalError
# Rows one INSERT writes (4 variables each: within the 999 even old SQLite builds allow).
ROWS_PER_STATEMENT = 200

# The tables whose rows carry a value of the client's size (a message, a summary with its
# archive, a meta record, a plan, a recall block, a memory): rowid tables, whose key
# (tenant, session and position) lives in an index of its own, a few dozen bytes a row.
# Earlier releases kept them WITHOUT ROWID, the whole row in its key's b-tree: SQLite
# compares a key with a row that overflows its page by reading all of the row, so one
# 5 MB message made every insert or read beside it, in any session, read 5 MB (a
# two-message commit took 40 ms instead of 0.2; 2,000 rows missed the 4 s deadline).
_SESSION = ("tenant TEXT NOT NULL", "session TEXT NOT NULL")
TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # (key columns, the others)
    "sessions": (
        _SESSION,
        (
            "version INTEGER NOT NULL",
            "length INTEGER NOT NULL",
            "checkpoints INTEGER NOT NULL",
            "expires REAL",
            "meta BLOB NOT NULL",
        ),
    ),
    "messages": ((*_SESSION, "position INTEGER NOT NULL"), ("entry BLOB NOT NULL",)),
    "checkpoints": ((*_SESSION, "position INTEGER NOT NULL"), ("entry BLOB NOT NULL",)),
    "plans": ((*_SESSION, "version INTEGER NOT NULL"), ("entry BLOB NOT NULL",)),
    "inserts": (_SESSION, ("data BLOB NOT NULL",)),
    "memories": (
        ("tenant TEXT NOT NULL", "memory TEXT NOT NULL"),
        ("version INTEGER NOT NULL", "data BLOB NOT NULL"),
    ),
}


def _names(columns: Sequence[str]) -> str:
    return ", ".join(column.split()[0] for column in columns)


def _table(name: str, called: str | None = None) -> str:
    """The statement that makes table `name` (under the name `called`)."""
    key, values = TABLES[name]
    columns = ",\n    ".join((*key, *values, f"PRIMARY KEY ({_names(key)})"))
    return f"CREATE TABLE IF NOT EXISTS {called or name} (\n    {columns}\n)"


EXPIRES_INDEX = (
    "CREATE INDEX IF NOT EXISTS sessions_expires ON sessions (expires) WHERE expires IS NOT NULL"
)
_CREATE = ";\n".join(_table(name) for name in TABLES)
SCHEMA = f"""
{_CREATE};
{EXPIRES_INDEX};
CREATE TABLE IF NOT EXISTS probe (id INTEGER PRIMARY KEY, at REAL NOT NULL);
DROP TABLE IF EXISTS locks;
CREATE TABLE IF NOT EXISTS leases (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    name TEXT NOT NULL,
    token TEXT NOT NULL,
    expires REAL NOT NULL,
    PRIMARY KEY (tenant, session, name)
) WITHOUT ROWID;
"""


class Database:
    """One connection to the store's database file. `wait` is how long a statement
    waits for another process's lock before raising `Busy`."""

    def __init__(self, path: Path, wait: float) -> None:
        self._connection = sqlite3.connect(
            path, timeout=wait, isolation_level=None, check_same_thread=False
        )
        self._connection.execute("PRAGMA journal_mode=WAL")
        self._connection.execute("PRAGMA synchronous=NORMAL")
        # No commit copies the log into the database (and syncs it) on its way: the store
        # does it beside the requests (`checkpoint`), on its worker thread.
        self._connection.execute("PRAGMA wal_autocheckpoint=0")

    def create(self) -> None:
        self._connection.executescript(SCHEMA)  # idempotent: IF NOT EXISTS throughout

    def old_tables(self) -> list[str]:
        """The tables still kept WITHOUT ROWID, as earlier releases made them."""
        rows = self._connection.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table'"
        ).fetchall()
        return [name for name, sql in rows if name in TABLES and "WITHOUT ROWID" in sql.upper()]

    def convert(self) -> list[str]:
        """Rewrite the tables earlier releases kept WITHOUT ROWID as rowid tables (see
        `TABLES`), in one transaction: a process killed meanwhile leaves them as they
        were, and another process that converted them first leaves nothing to do. The
        statements every release runs read and write both layouts alike. The names of
        the tables converted."""
        with self.transaction() as connection:
            old = self.old_tables()
            for name in old:
                columns = _names((*TABLES[name][0], *TABLES[name][1]))
                connection.execute(f"DROP TABLE IF EXISTS {name}_converted")
                connection.execute(_table(name, f"{name}_converted"))
                connection.execute(
                    f"INSERT INTO {name}_converted ({columns}) SELECT {columns} FROM {name}"
                )
                connection.execute(f"DROP TABLE {name}")
                connection.execute(f"ALTER TABLE {name}_converted RENAME TO {name}")
            if "sessions" in old:  # its index went with the table it indexed
                connection.execute(EXPIRES_INDEX)
        return old

    def close(self) -> None:
        self._connection.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (taken at once: BEGIN IMMEDIATE), committed or rolled back."""
        connection = self._connection
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        except BaseException:
            if connection.in_transaction:  # SQLite ends it by itself on some errors (FULL)
                connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    def session(self, tenant: str, session: str) -> Row | None:
        """(version, length, checkpoints, expires, meta) of a live session."""
        row = self._connection.execute(
            "SELECT version, length, checkpoints, expires, meta FROM sessions"
            " WHERE tenant = ? AND session = ?",
            (tenant, session),
        ).fetchone()
        return row if row is not None and not _expired(row[3]) else None

    def sessions(
        self, tenant: str | None, after: tuple[str, str] | None, limit: int
    ) -> list[bytes]:
        """Meta records of live sessions in (tenant, session) order, after `after`."""
        args: list[float | str]
        where, args = ["(expires IS NULL OR expires >= ?)"], [time.time()]
        if tenant is not None:
            where.append("tenant = ?")
            args.append(tenant)
        if after is not None:
            where.append("(tenant, session) > (?, ?)")
            args += after
        rows = self._connection.execute(
            f"SELECT meta FROM sessions WHERE {' AND '.join(where)}"
            " ORDER BY tenant, session LIMIT ?",
            (*args, limit),
        ).fetchall()
        return [row[0] for row in rows]

    def entries(self, table: str, tenant: str, session: str, start: int, end: int) -> list[bytes]:
        rows = self._connection.execute(
            f"SELECT entry FROM {table} WHERE tenant = ? AND session = ?"
            " AND position >= ? AND position < ? ORDER BY position",
            (tenant, session, start, end),
        ).fetchall()
        return [row[0] for row in rows]

    def small_entries(
        self, table: str, tenant: str, session: str, start: int, end: int, most: int
    ) -> list[bytes] | None:
        """`entries`, or None if one of them is longer than `most` bytes: SQLite learns a
        value's length without reading it, so a read that would take long (a message of
        megabytes) is left to a connection off the event loop."""
        rows = self._connection.execute(
            f"SELECT CASE WHEN length(entry) <= ? THEN entry END FROM {table}"
            " WHERE tenant = ? AND session = ? AND position >= ? AND position < ?"
            " ORDER BY position",
            (most, tenant, session, start, end),
        ).fetchall()
        values = [row[0] for row in rows]
        return None if None in values else values

    def commit(
        self,
        tenant: str,
        session: str,
        expected: int,
        keep: int,
        entries: Sequence[bytes],
        kept_checkpoints: int,
        checkpoints: Sequence[bytes],
        record: tuple[int, int, int, float | None, bytes],
        deadline: float = math.inf,
        plan: bytes | None = None,
        inserts: bytes | None = None,
    ) -> bool:
        """Compare-and-set on the version; cut the transcript (and checkpoints) to what is
        kept, append the new ones, replace the meta record, add the plan record (the
        oldest beyond `PLANS_KEPT` go), replace the inserts where given. Rolled back
        (`LateCommit`) if the lock was had, or the writing done, after `deadline` (epoch
        seconds)."""
        with self.transaction() as connection:
            _in_time(deadline)
            row = connection.execute(
                "SELECT version, length, checkpoints, expires FROM sessions"
                " WHERE tenant = ? AND session = ?",
                (tenant, session),
            ).fetchone()
            expired = row is not None and _expired(row[3])
            if expired:
                row = None
            if (row[0] if row else 0) != expected:
                return False
            length, count = (row[1], row[2]) if row else (0, 0)
            if expired:  # nothing of it may survive (an absent session has no rows at all)
                self._remove(tenant, session)
            if keep < length:
                self._cut("messages", tenant, session, keep)
            if kept_checkpoints < count:
                self._cut("checkpoints", tenant, session, kept_checkpoints)
            self._append("messages", tenant, session, keep, entries, deadline)
            self._append("checkpoints", tenant, session, kept_checkpoints, checkpoints, deadline)
            connection.execute(  # in place: the row keeps its rowid, its key's index entry
                "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (tenant, session) DO UPDATE SET version = excluded.version,"
                " length = excluded.length, checkpoints = excluded.checkpoints,"
                " expires = excluded.expires, meta = excluded.meta",
                (tenant, session, *record),
            )
            if plan is not None:
                self._add_plan(tenant, session, record[0], plan)
            if inserts is not None:
                connection.execute(
                    "INSERT OR REPLACE INTO inserts VALUES (?, ?, ?)", (tenant, session, inserts)
                )
            _in_time(deadline)
        return True

    def _append(
        self,
        table: str,
        tenant: str,
        session: str,
        first: int,
        values: Sequence[bytes],
        deadline: float,
    ) -> None:
        """`values` at positions `first`, ... : `ROWS_PER_STATEMENT` rows a statement, so a
        turn of many messages goes in and out of SQLite (and the GIL) a few hundred times
        rather than once a row; the deadline checked after each, so a commit that cannot
        make it gives the write lock back early, not after writing everything."""
        for start in range(0, len(values), ROWS_PER_STATEMENT):
            chunk = values[start : start + ROWS_PER_STATEMENT]
            rows = ", ".join(["(?, ?, ?, ?)"] * len(chunk))
            self._connection.execute(
                f"INSERT OR REPLACE INTO {table} VALUES {rows}",
                [
                    value
                    for position, entry in enumerate(chunk, first + start)
                    for value in (tenant, session, position, entry)
                ],
            )
            _in_time(deadline)

    def _add_plan(self, tenant: str, session: str, version: int, plan: bytes) -> None:
        connection = self._connection
        connection.execute(
            "INSERT OR REPLACE INTO plans VALUES (?, ?, ?, ?)", (tenant, session, version, plan)
        )
        # Versions only grow, so the newest PLANS_KEPT lie within that many versions.
        connection.execute(
            "DELETE FROM plans WHERE tenant = ? AND session = ? AND version <= ?",
            (tenant, session, version - PLANS_KEPT),
        )

    def plans(self, tenant: str, session: str) -> list[bytes]:
        rows = self._connection.execute(
            "SELECT entry FROM plans WHERE tenant = ? AND session = ? ORDER BY version",
            (tenant, session),
        ).fetchall()
        return [row[0] for row in rows]

    def inserts(self, tenant: str, session: str) -> bytes | None:
        row = self._connection.execute(
            "SELECT data FROM inserts WHERE tenant = ? AND session = ?", (tenant, session)
        ).fetchone()
        return bytes(row[0]) if row is not None else None

    def delete(self, tenant: str, session: str) -> bool:
        with self.transaction():
            existed = self.session(tenant, session) is not None
            self._remove(tenant, session)
        return existed

    def memory(self, tenant: str, memory: str) -> Row | None:
        """(version, data) of a memory."""
        return self._connection.execute(
            "SELECT version, data FROM memories WHERE tenant = ? AND memory = ?",
            (tenant, memory),
        ).fetchone()

    def put_memory(self, tenant: str, memory: str, expected: int, data: bytes) -> bool:
        """Compare-and-set on the version (0 = absent); the new version is expected + 1."""
        with self.transaction() as connection:
            row = self.memory(tenant, memory)
            if (row[0] if row else 0) != expected:
                return False
            connection.execute(
                "INSERT OR REPLACE INTO memories VALUES (?, ?, ?, ?)",
                (tenant, memory, expected + 1, data),
            )
        return True

    def delete_memory(self, tenant: str, memory: str) -> bool:
        with self.transaction() as connection:
            cursor = connection.execute(
                "DELETE FROM memories WHERE tenant = ? AND memory = ?", (tenant, memory)
            )
        return cursor.rowcount > 0

    def expire(self) -> int:
        """Remove every session whose TTL passed, with its messages and checkpoints."""
        now = time.time()
        with self.transaction() as connection:
            for table in ("messages", "checkpoints", "plans", "inserts"):
                connection.execute(
                    f"DELETE FROM {table} WHERE (tenant, session) IN"
                    " (SELECT tenant, session FROM sessions WHERE expires < ?)",
                    (now,),
                )
            return connection.execute("DELETE FROM sessions WHERE expires < ?", (now,)).rowcount

    # Each lock operation is one statement, so one transaction of its own (autocommit).

    def lock(self, tenant: str, session: str, name: str, token: str, seconds: float) -> bool:
        """Take the lock if it is free or its holder's time ran out."""
        now = time.time()
        taken = self._connection.execute(
            "INSERT INTO leases VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (tenant, session, name) DO UPDATE"
            " SET token = excluded.token, expires = excluded.expires WHERE expires < ?",
            (tenant, session, name, token, now + seconds, now),
        )
        return taken.rowcount == 1

    def extend(self, tenant: str, session: str, name: str, token: str, seconds: float) -> bool:
        now = time.time()
        updated = self._connection.execute(
            "UPDATE leases SET expires = ? WHERE tenant = ? AND session = ? AND name = ?"
            " AND token = ? AND expires >= ?",
            (now + seconds, tenant, session, name, token, now),
        )
        return updated.rowcount == 1

    def unlock(self, tenant: str, session: str, name: str, token: str) -> None:
        self._connection.execute(
            "DELETE FROM leases WHERE tenant = ? AND session = ? AND name = ? AND token = ?",
            (tenant, session, name, token),
        )

    def probe(self) -> None:
        """A real write, as a turn's commit makes one (readiness: a store that answers
        reads may still refuse writes: a full volume, a damaged file)."""
        with self.transaction() as connection:
            connection.execute("INSERT OR REPLACE INTO probe VALUES (1, ?)", (time.time(),))

    def checkpoint(self, truncate: bool = False) -> None:
        """Copy what the write-ahead log holds into the database, as far as no reader
        still needs it (PASSIVE: it waits for no one); or, with `truncate`, all of it,
        and empty the log's file (after a conversion wrote a copy of the tables to it)."""
        self._connection.execute(f"PRAGMA wal_checkpoint({'TRUNCATE' if truncate else 'PASSIVE'})")

    def _cut(self, table: str, tenant: str, session: str, keep: int) -> None:
        self._connection.execute(
            f"DELETE FROM {table} WHERE tenant = ? AND session = ? AND position >= ?",
            (tenant, session, keep),
        )

    def _remove(self, tenant: str, session: str) -> None:
        for table in ("messages", "checkpoints", "plans", "inserts", "sessions"):
            self._connection.execute(
                f"DELETE FROM {table} WHERE tenant = ? AND session = ?",
                (tenant, session),
            )


def _in_time(deadline: float) -> None:
    if time.time() > deadline:
        raise LateCommit("the commit reached the store after its deadline")


def _expired(expires: float | None) -> bool:
    return expires is not None and expires < time.time()
