"""Session store on local disk: one SQLite database, append-only.

A session is a meta record plus one row per message and per checkpoint (see
`proxy.sessions.stores.sqlite`). A turn writes its new messages and the meta record in one
transaction, under compare-and-set on the version; SQLite's locking makes that safe
for several worker processes sharing the directory. Sessions are history, not cache:
nothing is evicted for size; with a TTL, a session idle that long is gone (reads see
it absent at once, its rows are removed every hundred commits).

Sessions written by release 0.1, which kept them in diskcache, are converted the first
time they are read.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import secrets
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import orjson

from proxy.sessions.records import (
    COMMIT_GRACE_SECONDS,
    COMMIT_SECONDS,
    Checkpoint,
    Commit,
    LockName,
    ParsedMetas,
    SessionMeta,
    StoredMessage,
    parsed,
    serialized,
)
from proxy.sessions.stores.fencing import LeaseLost
from proxy.sessions.stores.file_locks import FileLocks
from proxy.sessions.stores.sqlite import Busy, Database

__all__ = ["DiskSessionStore"]

T = TypeVar("T")
logger = logging.getLogger("context_proxy.stores")
FILE = "sessions.sqlite3"
LOCK_FILE = "turns.lock"
_EXPIRE_EVERY = 100  # commits between two sweeps of expired sessions
_INLINE_ROWS = 16  # rows read or written on the event loop; more go to the worker thread
# Bytes a commit writes, or a read reads, on the event loop (SQLite takes ~2 ms for a
# quarter megabyte); a larger one goes to the worker thread, where SQLite lets the loop
# run meanwhile.
_INLINE_BYTES = 256 * 1024
_WAIT_SECONDS = 60.0  # how long the worker thread waits for another process's lock
_CHECKPOINT_BYTES = 4 << 20  # written between two checkpoints (SQLite's default: ~4 MB)


class DiskSessionStore:
    """SessionStore on SQLite; values are orjson bytes.

    An operation first runs on the event loop through a connection that never waits for
    a lock (in WAL mode readers never wait, and the ~0.15 ms of a commit costs less than
    the hop to a thread and back); if SQLite is busy (another process writing) it runs
    again on the store's one worker thread, through a connection that waits. One that
    reads or writes much (many rows; a commit of megabytes) runs there at once: SQLite
    lets the event loop run while it works, so no large turn holds up the others.
    """

    def __init__(
        self, directory: str, ttl_seconds: float | None = None, min_free_bytes: int = 0
    ) -> None:
        self._directory = Path(directory)
        self._path = str(self._directory / FILE)
        self._min_free = min_free_bytes
        self._databases: tuple[Database, Database] | None = None
        self._file: tuple[int, int] | None = None  # the database file opened: (device, inode)
        self._file_locks: FileLocks | None = None
        # A directory that cannot be written yet is a fault of each request, not fatal.
        with contextlib.suppress(OSError, sqlite3.Error):
            self._convert(self._open()[1])
        self._ttl = ttl_seconds
        self._commits = 0
        self._logged = 0  # bytes committed since the last checkpoint was started
        self._checkpoint: asyncio.Future[None] | None = None
        self._parsed = ParsedMetas()
        self._old: Any = None  # release 0.1's diskcache, opened when first needed
        self._may_have_legacy = True
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="disk-store")

    def _open(self) -> tuple[Database, Database]:
        """The quick and the patient connection, opened on first use (again after the
        directory could not be opened)."""
        if self._databases is None:
            self._directory.mkdir(parents=True, exist_ok=True)
            path = self._directory / FILE
            quick = Database(path, wait=0)
            try:
                quick.create()
                stat = path.stat()
                self._file = (stat.st_dev, stat.st_ino)
                self._databases = (quick, Database(path, wait=_WAIT_SECONDS))
            except BaseException:
                quick.close()
                raise
        return self._databases

    def _convert(self, database: Database) -> None:
        """Tables an earlier release made in the layout that large messages slow down,
        converted (`Database.convert`) as the store opens, before it serves, if the disk
        has room for two copies of the file (the log holds one until it is copied back);
        else, or if it fails, served as they are and converted at a later start."""
        if not database.old_tables():
            return
        size = sum(
            path.stat().st_size if path.exists() else 0
            for path in (Path(self._path), Path(self._path + "-wal"))
        )
        stats = os.statvfs(self._directory)
        if stats.f_bavail * stats.f_frsize < self._min_free + 2 * size:
            logger.warning(
                "session store: its tables are in an earlier release's layout; converting"
                " them needs %d MB free; served as they are until then",
                (self._min_free + 2 * size) >> 20,
            )
            return
        logger.info("session store: converting %d MB of tables to the current layout", size >> 20)
        started = time.monotonic()
        try:
            converted = database.convert()
        except sqlite3.Error as exc:
            kind = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
            logger.warning("session store: tables not converted (%s); served as they are", kind)
            return
        with contextlib.suppress(sqlite3.Error):  # else emptied by a later checkpoint
            database.checkpoint(truncate=True)
        seconds = time.monotonic() - started
        logger.info("session store: converted %s in %.1f s", ", ".join(converted), seconds)

    async def _call(
        self,
        function: Callable[..., T],
        *args: Any,
        inline: bool = True,
        timeout: float | None = None,
    ) -> T:
        """`function(connection, *args)`; on the worker thread, waited for `timeout`
        seconds at most (the thread goes on: a commit it runs checks its own deadline)."""
        quick, patient = self._open()
        if inline:
            try:
                return function(quick, *args)
            except Busy:
                pass
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._thread, function, patient, *args)
        return await (asyncio.wait_for(future, timeout) if timeout is not None else future)

    async def load(self, tenant: str, session_id: str) -> SessionMeta | None:
        _check(tenant)
        row = await self._call(Database.session, tenant, session_id)
        if row is None:
            return await self._legacy(tenant, session_id)
        return self._parsed(bytes(row[4]))

    async def messages(
        self, tenant: str, session_id: str, start: int, end: int
    ) -> list[StoredMessage]:
        if end <= start:
            return []
        where = ("messages", tenant, session_id, start, end)
        values = None
        if end - start <= _INLINE_ROWS:  # on the event loop, unless one of them is large
            values = await self._call(Database.small_entries, *where, _INLINE_BYTES)
        if values is None:
            values = await self._call(Database.entries, *where, inline=False)
        if len(values) != end - start:
            raise LookupError(f"session is missing messages in [{start}, {end})")
        return await parsed(values, StoredMessage.from_dict)

    async def checkpoints(self, tenant: str, session_id: str, start: int = 0) -> list[Checkpoint]:
        def read(database: Database, most: int | None) -> list[bytes] | None:
            row = database.session(tenant, session_id)
            where = ("checkpoints", tenant, session_id, start, row[2] if row else 0)
            if most is None:
                return database.entries(*where)
            return database.small_entries(*where, most)

        values = await self._call(read, _INLINE_BYTES)  # on the loop, unless one is large
        if values is None:
            values = await self._call(read, None, inline=False)
        assert values is not None
        return await parsed(values, Checkpoint.from_dict)

    async def commit(self, change: Commit) -> bool:
        """Compare-and-set; False if someone else wrote (or deleted) the session first.
        With `release`, fenced on that turn lock as Redis's commit is (`LeaseLost`), though
        here it only ends with its process."""
        meta, expected_version, keep = change.meta, change.expected_version, change.keep
        appended, checkpoints, release = change.appended, change.checkpoints, change.release
        plan, inserts = change.plan, change.inserts
        _check(meta.tenant)
        self._same_file()
        ours = release is not None and self._holds_turn(meta.tenant, meta.session_id, release)
        entries, summaries = await serialized(appended), await serialized(checkpoints)
        # From when it is handed to SQLite: serializing 87,381 messages took 1-2 s of the
        # four here in a thread, more while a busy event loop shares the interpreter.
        deadline = time.time() + COMMIT_SECONDS
        expires = time.time() + self._ttl if self._ttl else None
        data = orjson.dumps(meta.to_dict())
        record = (meta.version, meta.length, meta.checkpoints, expires, data)
        size = sum(map(len, entries)) + sum(map(len, summaries)) + len(plan or b"")
        size += len(data) + len(inserts or b"")
        done = await self._call(
            Database.commit,
            meta.tenant,
            meta.session_id,
            expected_version,
            keep,
            entries,
            meta.checkpoints - len(summaries),
            summaries,
            record,
            deadline,
            plan,
            inserts,
            inline=len(entries) + len(summaries) <= _INLINE_ROWS and size <= _INLINE_BYTES,
            timeout=COMMIT_SECONDS + COMMIT_GRACE_SECONDS,
        )
        if not done and release is not None and not ours:
            raise LeaseLost("the turn lock was lost and the session went on without the turn")
        if done:
            if release is not None:
                await self.unlock(meta.tenant, meta.session_id, release, "turn")
            self._parsed.remember(data, meta)
            self._commits += 1
            if self._ttl and self._commits % _EXPIRE_EVERY == 0:
                await self._call(Database.expire, inline=False)
            self._logged += size
            self._checkpointed()
        return done

    def _checkpointed(self) -> None:
        """Start a checkpoint on the worker thread once enough was written since the last
        (`Database.checkpoint`): no request waits for it, and one runs at a time."""
        if self._logged < _CHECKPOINT_BYTES or (self._checkpoint and not self._checkpoint.done()):
            return
        self._logged = 0
        _, patient = self._open()
        loop = asyncio.get_running_loop()
        self._checkpoint = loop.run_in_executor(self._thread, Database.checkpoint, patient)
        self._checkpoint.add_done_callback(_log_failure)

    async def plans(self, tenant: str, session_id: str) -> list[bytes]:
        _check(tenant)
        rows = await self._call(Database.plans, tenant, session_id, inline=False)
        return [bytes(row) for row in rows]

    async def inserts(self, tenant: str, session_id: str) -> bytes | None:
        _check(tenant)
        found: bytes | None = await self._call(Database.inserts, tenant, session_id)
        return found

    async def sessions(
        self, tenant: str | None, after: tuple[str, str] | None, limit: int
    ) -> list[SessionMeta]:
        rows = await self._call(Database.sessions, tenant, after, limit, inline=False)
        return self._parsed.listed(bytes(row) for row in rows)

    async def delete(self, tenant: str, session_id: str) -> bool:
        _check(tenant)
        if await self._call(Database.delete, tenant, session_id):
            return True
        return await self._delete_legacy(tenant, session_id)

    async def memory(self, tenant: str, memory_id: str) -> tuple[int, bytes] | None:
        _check(tenant)
        row = await self._call(Database.memory, tenant, memory_id)
        return (row[0], bytes(row[1])) if row else None

    async def put_memory(self, tenant: str, memory_id: str, expected: int, data: bytes) -> bool:
        _check(tenant)
        return await self._call(Database.put_memory, tenant, memory_id, expected, data)

    async def delete_memory(self, tenant: str, memory_id: str) -> bool:
        _check(tenant)
        return await self._call(Database.delete_memory, tenant, memory_id)

    async def writable(self, need: int = 0) -> None:
        """Raise unless a turn that writes up to `need` bytes can be stored: the database
        file is still the one opened, its filesystem mounted read-write with `need` bytes
        free beyond `min_free_bytes` (a stat and a statvfs call, a few microseconds)."""
        self._same_file()
        stats = os.statvfs(self._directory)
        if stats.f_flag & os.ST_RDONLY:
            raise OSError(errno.EROFS, "read-only filesystem", str(self._directory))
        if stats.f_bavail * stats.f_frsize < self._min_free + need:
            raise OSError(errno.ENOSPC, "less free space than a turn needs")

    async def ping(self) -> None:
        self._same_file()
        await self._call(Database.probe, inline=False)

    def _same_file(self) -> None:
        """Raise if the database file was removed or replaced since it was opened: what
        the open connections write would go to a file nobody reads again."""
        self._open()
        try:
            stat = os.stat(self._path)
        except FileNotFoundError:
            stat = None
        if stat is None or (stat.st_dev, stat.st_ino) != self._file:
            raise OSError(errno.ESTALE, "the database file was removed or replaced")

    async def close(self) -> None:
        if self._old is not None:
            self._old.close()
        if self._databases is not None:
            quick, patient = self._databases
            quick.close()
            await asyncio.get_running_loop().run_in_executor(self._thread, patient.close)
        if self._file_locks is not None:
            self._file_locks.close()
        self._thread.shutdown(wait=False)

    async def try_lock(
        self,
        tenant: str,
        session_id: str,
        seconds: float,
        name: LockName,
        token: str | None = None,
    ) -> str | None:
        token = token or secrets.token_hex(16)
        if name == "turn":  # every turn takes it: a system call, not a transaction
            locked = self._turn_locks().acquire(_lock_key(tenant, session_id), token)
        else:
            locked = await self._call(Database.lock, tenant, session_id, name, token, seconds)
        return token if locked else None

    async def extend(
        self, tenant: str, session_id: str, token: str, seconds: float, name: LockName
    ) -> bool:
        if name == "turn":  # held until released, or until this process ends
            return self._turn_locks().holds(_lock_key(tenant, session_id), token)
        return await self._call(Database.extend, tenant, session_id, name, token, seconds)

    async def unlock(self, tenant: str, session_id: str, token: str, name: LockName) -> None:
        if name == "turn":
            self._turn_locks().release(_lock_key(tenant, session_id), token)
        else:
            await self._call(Database.unlock, tenant, session_id, name, token)

    def _holds_turn(self, tenant: str, session_id: str, token: str) -> bool:
        """Whether `token` holds the session's turn lock; `LeaseLost` if another does."""
        key, locks = _lock_key(tenant, session_id), self._turn_locks()
        if locks.held_by_another(key, token):
            raise LeaseLost("another turn holds the session's turn lock")
        return locks.holds(key, token)

    def _turn_locks(self) -> FileLocks:
        if self._file_locks is None:
            self._directory.mkdir(parents=True, exist_ok=True)
            self._file_locks = FileLocks(self._directory / LOCK_FILE)
        return self._file_locks

    async def _legacy(self, tenant: str, session_id: str) -> SessionMeta | None:
        """A session written by release 0.1 (one diskcache value per session, in this
        directory): written into the tables and removed from diskcache, once."""
        cache = self._legacy_cache()
        if cache is None:
            return None
        from proxy.sessions.stores.legacy import convert

        key = f"{tenant}:{session_id}"
        raw = await self._call(lambda _: cache.get(key), inline=False)
        if raw is None:
            return None
        meta, messages, checkpoints = convert(orjson.loads(raw))
        # At its own version, into empty tables: if another worker converted it first,
        # this compare-and-set fails and the session is read as that worker wrote it.
        converted = meta.evolve(checkpoints=len(checkpoints))
        if await self.commit(Commit(converted, 0, 0, messages, checkpoints)):
            await self._call(lambda _: cache.delete(key), inline=False)
        row = await self._call(Database.session, tenant, session_id)
        return SessionMeta.from_dict(orjson.loads(row[4])) if row is not None else None

    async def _delete_legacy(self, tenant: str, session_id: str) -> bool:
        cache = self._legacy_cache()
        if cache is None:
            return False
        key = f"{tenant}:{session_id}"
        return bool(await self._call(lambda _: cache.delete(key), inline=False))

    def _legacy_cache(self) -> Any:
        """Release 0.1's diskcache database in this directory, if there is one (looked
        for until found absent once: no release writes one any more)."""
        if self._old is None and self._may_have_legacy:
            self._may_have_legacy = (self._directory / "cache.db").is_file()
            if not self._may_have_legacy:
                return None
            import diskcache

            self._old = diskcache.Cache(
                str(self._directory), eviction_policy="none", size_limit=2**62
            )
        return self._old


def _log_failure(future: asyncio.Future[None]) -> None:
    """A checkpoint that failed is tried again after the next few megabytes: the log
    holds what it did not copy, so nothing is lost."""
    if not future.cancelled() and (error := future.exception()) is not None:
        logger.warning("session store checkpoint failed: %s", type(error).__name__)


def _lock_key(tenant: str, session_id: str) -> str:
    return f"{tenant}\0{session_id}"  # neither holds a NUL


def _check(tenant: str) -> str:
    # Tenants never contain ":" (see tenant_id): a session id cannot pose as another
    # tenant's in the keys release 0.1 used.
    if ":" in tenant:
        raise ValueError("tenant must not contain ':'")
    return tenant
