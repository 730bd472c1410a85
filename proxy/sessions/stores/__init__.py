"""Session store backends (see `proxy.sessions.store.SessionStore`)."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import sqlite3
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

from redis.exceptions import OutOfMemoryError, RedisClusterException, RedisError

from proxy.config.settings import SessionSettings
from proxy.errors import SessionConflict, StoreUnavailable
from proxy.observability import metrics
from proxy.sessions.records import Checkpoint, Commit, LockName, SessionMeta, StoredMessage
from proxy.sessions.store import SessionStore
from proxy.sessions.stores.disk import DiskSessionStore
from proxy.sessions.stores.fencing import LeaseLost

__all__ = ["DiskSessionStore", "LeaseLost", "TimedStore", "open_store", "tenant_secret"]

T = TypeVar("T")
logger = logging.getLogger("context_proxy.stores")


def open_store(settings: SessionSettings) -> SessionStore:
    """The store the config names, with its operations timed."""
    if settings.store == "redis":
        from proxy.sessions.stores.redis import RedisSessionStore

        return TimedStore(RedisSessionStore(settings.redis_url, settings.ttl_seconds), "redis")
    free = int(settings.min_free_mb * 2**20)
    return TimedStore(DiskSessionStore(settings.path, settings.ttl_seconds, free), "disk")


# What a store that cannot be reached, read or written raises (Redis down or timing out,
# SQLite's file read-only, locked or on a full disk), and what a damaged record does when
# it is read back (not JSON, a field missing, messages missing from a range).
STORE_FAULTS = (sqlite3.Error, OSError, RedisError, RedisClusterException)
DAMAGED = (ValueError, LookupError)
READY_BYTES = 64 * 1024  # room for a small turn, below which the store is not ready
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_READ_ONLY = {errno.EROFS, errno.EACCES, errno.EPERM}


def store_fault(exc: BaseException) -> StoreUnavailable:
    """The error of a store fault, saying what kind it is (the store's own words, which
    may name paths or hosts, stay in the log)."""
    name = getattr(exc, "sqlite_errorname", "")
    if isinstance(exc, TimeoutError):  # a commit past its deadline (Redis's own are not)
        message = "The session store did not take the turn in time; retry it."
    elif isinstance(exc, DAMAGED):
        message = "The session store holds a damaged record for this request; it was left as it is."
    elif getattr(exc, "errno", None) == errno.ESTALE:
        message = (
            "The session store's database file was removed or replaced while in use;"
            " restart the proxy to open it again."
        )
    elif name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        message = "The session store's database file is damaged."
    elif isinstance(exc, OutOfMemoryError):
        message = "The session store (Redis) is out of memory (maxmemory); retry once it has room."
    elif name.startswith("SQLITE_FULL") or getattr(exc, "errno", None) in _FULL:
        message = "The session store's disk is full; retry once space is freed."
    elif name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM")) or (
        getattr(exc, "errno", None) in _READ_ONLY
    ):
        message = "The session store cannot be written (read-only); retry shortly."
    elif isinstance(exc, (RedisError, RedisClusterException)):
        message = "The session store (Redis) is unreachable; retry shortly."
    else:
        message = "The session store is unavailable; retry shortly."
    return StoreUnavailable(message)


def lease_lost() -> SessionConflict:
    """The conflict of a turn whose commit its lapsed turn lock fenced off (see LeaseLost)."""
    return SessionConflict(
        "This turn's session lock lapsed while it ran (its proxy stalled) and another turn"
        " of the session went ahead; its reply was not stored. Resend it with the"
        " session's current history."
    )


class TimedStore:
    """A SessionStore that records each operation's latency, and turns a store fault into
    a 503 that says so (the store's own words stay in the log, not the answer)."""

    def __init__(self, inner: SessionStore, name: str) -> None:
        self.inner = inner
        self._timers = {
            operation: metrics.STORE_DURATION.labels(name, operation)
            for operation in ("load", "read", "commit", "delete", "list", "ping", "lock")
        }

    async def _timed(self, operation: str, call: Awaitable[T]) -> T:
        started = time.perf_counter()
        try:
            return await call
        except LeaseLost as exc:
            logger.warning("a turn's commit refused: its turn lock lapsed while it ran")
            raise lease_lost() from exc
        except (*STORE_FAULTS, *DAMAGED) as exc:
            kind = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
            logger.warning("session store %s failed: %s", operation, kind)
            raise store_fault(exc) from exc
        finally:
            self._timers[operation].observe(time.perf_counter() - started)

    async def load(self, tenant: str, session_id: str) -> SessionMeta | None:
        return await self._timed("load", self.inner.load(tenant, session_id))

    async def messages(
        self, tenant: str, session_id: str, start: int, end: int
    ) -> list[StoredMessage]:
        return await self._timed("read", self.inner.messages(tenant, session_id, start, end))

    async def checkpoints(self, tenant: str, session_id: str, start: int = 0) -> list[Checkpoint]:
        return await self._timed("read", self.inner.checkpoints(tenant, session_id, start))

    async def commit(self, change: Commit) -> bool:
        return await self._timed("commit", self.inner.commit(change))

    async def plans(self, tenant: str, session_id: str) -> list[bytes]:
        return await self._timed("read", self.inner.plans(tenant, session_id))

    async def inserts(self, tenant: str, session_id: str) -> bytes | None:
        return await self._timed("read", self.inner.inserts(tenant, session_id))

    async def delete(self, tenant: str, session_id: str) -> bool:
        return await self._timed("delete", self.inner.delete(tenant, session_id))

    async def sessions(
        self, tenant: str | None, after: tuple[str, str] | None, limit: int
    ) -> list[SessionMeta]:
        return await self._timed("list", self.inner.sessions(tenant, after, limit))

    async def memory(self, tenant: str, memory_id: str) -> tuple[int, bytes] | None:
        return await self._timed("read", self.inner.memory(tenant, memory_id))

    async def put_memory(self, tenant: str, memory_id: str, expected: int, data: bytes) -> bool:
        return await self._timed("commit", self.inner.put_memory(tenant, memory_id, expected, data))

    async def delete_memory(self, tenant: str, memory_id: str) -> bool:
        return await self._timed("delete", self.inner.delete_memory(tenant, memory_id))

    async def writable(self, need: int = 0) -> None:
        await self._timed("ping", self.inner.writable(need))

    async def ping(self) -> None:
        """Ready: the store takes a real write, and has room for a small turn."""
        await self._timed("ping", self.inner.ping())
        await self._timed("ping", self.inner.writable(READY_BYTES))

    async def close(self) -> None:
        await self.inner.close()

    async def try_lock(
        self,
        tenant: str,
        session_id: str,
        seconds: float,
        name: LockName,
        token: str | None = None,
    ) -> str | None:
        call = self.inner.try_lock(tenant, session_id, seconds, name, token)
        return await self._timed("lock", call)

    async def extend(
        self, tenant: str, session_id: str, token: str, seconds: float, name: LockName
    ) -> bool:
        call = self.inner.extend(tenant, session_id, token, seconds, name)
        return await self._timed("lock", call)

    async def unlock(self, tenant: str, session_id: str, token: str, name: LockName) -> None:
        await self._timed("lock", self.inner.unlock(tenant, session_id, token, name))


def tenant_secret(settings: SessionSettings) -> bytes:
    """The key that turns bearer tokens into tenant ids: configured, or made once and
    kept beside the sessions so every worker and restart agrees."""
    if settings.tenant_secret:
        return settings.tenant_secret.encode()
    path = Path(settings.path, "tenant.key")
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(32))
    for _ in range(50):  # another worker may be writing it right now
        text = path.read_text().strip()
        if text:
            return text.encode()
        time.sleep(0.01)
    raise RuntimeError(f"{path} is empty")
