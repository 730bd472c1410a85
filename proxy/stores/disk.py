"""Session store on local disk (diskcache over SQLite), append-only.

A session is a meta record plus one key per message and per checkpoint, all in one
SQLite database so a turn's writes commit together: a turn writes its new messages and
the meta record in one transaction, under compare-and-set on the version. SQLite
locking makes it safe for several worker processes sharing the directory.

Sessions are history, not cache: nothing is evicted for size. With a TTL the meta
record expires when the session has been idle that long; message and checkpoint keys
are given twice the TTL and all refreshed at most once per TTL, so they always outlive
the meta record of a live session and are culled after it of an idle one.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import diskcache
import orjson

from proxy.sessions import Checkpoint, SessionMeta, StoredMessage

__all__ = ["DiskSessionStore"]

T = TypeVar("T")
_NO_SIZE_LIMIT = 2**62
# diskcache keeps values above `disk_min_file_size` in separate files and deletes the
# old file on overwrite, so a read racing a write can find the file gone and report
# a miss. Kept inline, every read is one atomic SQLite row.
_ALWAYS_INLINE = 2**40
_REFRESHED = "data_expires"  # meta field: when the earliest message/checkpoint key expires


class DiskSessionStore:
    """SessionStore on diskcache; values are orjson bytes.

    Every operation runs on one worker thread: within a process they never wait on
    each other's SQLite locks (which back off in sleeps), only across processes.
    """

    def __init__(self, directory: str, ttl_seconds: float | None = None) -> None:
        # eviction_policy="none" disables size-based culling entirely; the huge
        # size_limit is a second guard. Expired entries are still purged.
        self._cache = diskcache.Cache(
            directory,
            eviction_policy="none",
            size_limit=_NO_SIZE_LIMIT,
            disk_min_file_size=_ALWAYS_INLINE,
        )
        self._ttl = ttl_seconds
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="disk-store")

    async def _run(self, function: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, function, *args)

    async def load(self, tenant: str, session_id: str) -> SessionMeta | None:
        raw = await self._run(self._cache.get, _meta_key(tenant, session_id))
        if raw is None:
            return await self._legacy(tenant, session_id)
        return SessionMeta.from_dict(orjson.loads(raw))

    async def messages(
        self, tenant: str, session_id: str, start: int, end: int
    ) -> list[StoredMessage]:
        def read() -> list[bytes | None]:
            with self._cache.transact(retry=True):
                keys = [_message_key(tenant, session_id, i) for i in range(start, end)]
                return [self._cache.get(key) for key in keys]

        values = await self._run(read)
        if any(value is None for value in values):
            raise LookupError(f"session is missing messages in [{start}, {end})")
        return [StoredMessage.from_dict(orjson.loads(value)) for value in values]  # type: ignore[arg-type]

    async def checkpoints(self, tenant: str, session_id: str) -> list[Checkpoint]:
        def read() -> list[bytes]:
            with self._cache.transact(retry=True):
                raw = self._cache.get(_meta_key(tenant, session_id))
                count = orjson.loads(raw)["checkpoints"] if raw is not None else 0
                keys = [_checkpoint_key(tenant, session_id, i) for i in range(count)]
                return [value for value in map(self._cache.get, keys) if value is not None]

        return [Checkpoint.from_dict(orjson.loads(value)) for value in await self._run(read)]

    async def commit(
        self,
        meta: SessionMeta,
        expected_version: int,
        keep: int,
        appended: Sequence[StoredMessage],
        checkpoints: Sequence[Checkpoint] = (),
    ) -> bool:
        """Compare-and-set; False if someone else wrote (or deleted) the session first."""
        entries = [orjson.dumps(stored.to_dict()) for stored in appended]
        summaries = [orjson.dumps(checkpoint.to_dict()) for checkpoint in checkpoints]
        return await self._run(self._commit, meta, expected_version, keep, entries, summaries)

    async def delete(self, tenant: str, session_id: str) -> bool:
        def remove() -> bool:
            with self._cache.transact(retry=True):
                raw = self._cache.get(_meta_key(tenant, session_id))
                if raw is None:
                    return bool(self._cache.delete(_legacy_key(tenant, session_id), retry=True))
                stored = orjson.loads(raw)
                self._drop(tenant, session_id, stored, 0, 0)
                return bool(self._cache.delete(_meta_key(tenant, session_id), retry=True))

        return await self._run(remove)

    async def ping(self) -> bool:
        try:
            await self._run(self._cache.get, "ping")
        except Exception:
            return False
        return True

    async def close(self) -> None:
        await self._run(self._cache.close)
        self._thread.shutdown(wait=False)

    async def try_lock(self, tenant: str, session_id: str, seconds: float) -> str | None:
        token = secrets.token_hex(16)
        key = _lock_key(tenant, session_id)
        added = await self._run(lambda: self._cache.add(key, token, expire=seconds, retry=True))
        return token if added else None

    async def unlock(self, tenant: str, session_id: str, token: str) -> None:
        key = _lock_key(tenant, session_id)

        def release() -> None:
            with self._cache.transact(retry=True):
                if self._cache.get(key) == token:
                    self._cache.delete(key, retry=True)

        await self._run(release)

    def _commit(
        self,
        meta: SessionMeta,
        expected: int,
        keep: int,
        entries: list[bytes],
        summaries: list[bytes],
    ) -> bool:
        tenant, session_id = meta.tenant, meta.session_id
        now = time.time()
        with self._cache.transact(retry=True):
            raw = self._cache.get(_meta_key(tenant, session_id))
            stored = orjson.loads(raw) if raw is not None else None
            if (stored["version"] if stored else 0) != expected:
                return False
            if stored is not None:
                self._drop(tenant, session_id, stored, meta.length, meta.checkpoints)
            refreshed = stored.get(_REFRESHED, 0.0) if stored else 0.0
            if self._ttl and refreshed < now + self._ttl:  # at most once per TTL
                if stored is not None:
                    self._refresh(
                        tenant, session_id, keep, min(meta.checkpoints, stored["checkpoints"])
                    )
                refreshed = now + 2 * self._ttl
            for index, entry in enumerate(entries, start=keep):
                self._set(_message_key(tenant, session_id, index), entry)
            first = meta.checkpoints - len(summaries)
            for index, summary in enumerate(summaries, start=first):
                self._set(_checkpoint_key(tenant, session_id, index), summary)
            self._set_meta(meta, refreshed)
            if stored is None:
                self._cache.delete(_legacy_key(tenant, session_id), retry=True)
            return True

    def _set(self, key: str, value: bytes) -> None:
        """A message or checkpoint key: twice the TTL (see the module docstring)."""
        self._cache.set(key, value, expire=2 * self._ttl if self._ttl else None, retry=True)

    def _set_meta(self, meta: SessionMeta, refreshed: float) -> None:
        record = orjson.dumps(meta.to_dict() | {_REFRESHED: refreshed})
        key = _meta_key(meta.tenant, meta.session_id)
        self._cache.set(key, record, expire=self._ttl, retry=True)

    def _drop(
        self, tenant: str, session_id: str, stored: dict[str, Any], length: int, checkpoints: int
    ) -> None:
        """Remove the messages and checkpoints beyond new ends (a fork, or a delete)."""
        for index in range(length, stored["length"]):
            self._cache.delete(_message_key(tenant, session_id, index), retry=True)
        for index in range(checkpoints, stored["checkpoints"]):
            self._cache.delete(_checkpoint_key(tenant, session_id, index), retry=True)

    def _refresh(self, tenant: str, session_id: str, messages: int, checkpoints: int) -> None:
        """Extend every message and checkpoint key that stays."""
        seconds = 2 * self._ttl if self._ttl else None
        for index in range(messages):
            self._cache.touch(_message_key(tenant, session_id, index), seconds, retry=True)
        for index in range(checkpoints):
            self._cache.touch(_checkpoint_key(tenant, session_id, index), seconds, retry=True)

    async def _legacy(self, tenant: str, session_id: str) -> SessionMeta | None:
        """A session written by release 0.1 (one JSON value per session): converted to
        this layout on first read, in one transaction."""
        from proxy.stores.legacy import convert

        raw = await self._run(self._cache.get, _legacy_key(tenant, session_id))
        if raw is None:
            return None
        meta, messages, checkpoints = convert(orjson.loads(raw))
        stored = meta.evolve(checkpoints=len(checkpoints))

        def write() -> SessionMeta | None:
            with self._cache.transact(retry=True):
                if self._cache.get(_meta_key(tenant, session_id)) is not None:
                    return None  # converted meanwhile by another worker
                for index, message in enumerate(messages):
                    self._set(
                        _message_key(tenant, session_id, index), orjson.dumps(message.to_dict())
                    )
                for index, item in enumerate(checkpoints):
                    self._set(
                        _checkpoint_key(tenant, session_id, index), orjson.dumps(item.to_dict())
                    )
                self._set_meta(stored, time.time() + 2 * self._ttl if self._ttl else 0.0)
                self._cache.delete(_legacy_key(tenant, session_id), retry=True)
                return stored

        converted = await self._run(write)
        return converted if converted is not None else await self.load(tenant, session_id)


# Tenants never contain ":" (see tenant_id) and indexes are fixed-width at the end, so
# no session id can reach another tenant's or another session's keys.
def _check(tenant: str) -> str:
    if ":" in tenant:
        raise ValueError("tenant must not contain ':'")
    return tenant


def _legacy_key(tenant: str, session_id: str) -> str:
    return f"{_check(tenant)}:{session_id}"


def _meta_key(tenant: str, session_id: str) -> str:
    return f"s:{_check(tenant)}:{session_id}"


def _message_key(tenant: str, session_id: str, index: int) -> str:
    return f"m:{_check(tenant)}:{session_id}:{index:012d}"


def _checkpoint_key(tenant: str, session_id: str, index: int) -> str:
    return f"c:{_check(tenant)}:{session_id}:{index:012d}"


def _lock_key(tenant: str, session_id: str) -> str:
    return f"l:{_check(tenant)}:{session_id}"
