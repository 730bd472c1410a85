"""Session store on local disk (diskcache over SQLite), append-only.

A session is a meta record plus one key per message and per checkpoint, all in one
SQLite database so a turn's writes commit together: a turn writes its new messages and
the meta record in one transaction, under compare-and-set on the version. SQLite
locking makes it safe for several worker processes sharing the directory.

Sessions are history, not cache: nothing is evicted for size. With a TTL the meta
record expires when the session has been idle that long; message and checkpoint keys
are given twice the TTL and all refreshed at most once per TTL, so they always outlive
the meta record of a live session and are purged after it of an idle one.
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

from proxy.sessions import Checkpoint, SessionMeta, StoredMessage, serialized

__all__ = ["DiskSessionStore"]

T = TypeVar("T")
Cache = diskcache.Cache

_SETTINGS: dict[str, Any] = {
    # Sessions are never evicted for size (the huge limit is a second guard).
    "eviction_policy": "none",
    "size_limit": 2**62,
    # diskcache keeps values above `disk_min_file_size` in separate files and deletes the
    # old file on overwrite, so a read racing a write could find the file gone and report
    # a miss. Kept inline, every read is one atomic SQLite row.
    "disk_min_file_size": 2**40,
    # Expired keys are purged every `_EXPIRE_EVERY` commits rather than on every write.
    "cull_limit": 0,
}
_EXPIRE_EVERY = 100
_INLINE_KEYS = 16  # keys read or written on the event loop; more go to the worker thread
_REFRESHED = "data_expires"  # meta field: when the earliest message/checkpoint key expires


class DiskSessionStore:
    """SessionStore on diskcache; values are orjson bytes.

    An operation first runs on the event loop through a connection that never waits for
    a lock (in SQLite's WAL mode readers never wait, and the ~0.3 ms of a commit costs
    less than the hop to a thread and back); if SQLite is busy (another process writing)
    it runs again on the store's one worker thread, through a connection that waits.
    """

    def __init__(self, directory: str, ttl_seconds: float | None = None) -> None:
        self._patient = diskcache.Cache(directory, **_SETTINGS)
        self._quick = diskcache.Cache(directory, timeout=0, **_SETTINGS)
        self._ttl = ttl_seconds
        self._commits = 0
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="disk-store")

    async def _call(self, function: Callable[..., T], *args: Any, inline: bool = True) -> T:
        if inline:
            try:
                return function(self._quick, *args)
            except diskcache.Timeout:
                pass
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, function, self._patient, *args)

    async def load(self, tenant: str, session_id: str) -> SessionMeta | None:
        raw = await self._call(_get, _meta_key(tenant, session_id))
        if raw is None:
            return await self._legacy(tenant, session_id)
        return SessionMeta.from_dict(orjson.loads(raw))

    async def messages(
        self, tenant: str, session_id: str, start: int, end: int
    ) -> list[StoredMessage]:
        keys = [_message_key(tenant, session_id, i) for i in range(start, end)]
        values = await self._call(_get_all, keys, inline=len(keys) <= _INLINE_KEYS)
        if any(value is None for value in values):
            raise LookupError(f"session is missing messages in [{start}, {end})")
        return [StoredMessage.from_dict(orjson.loads(value)) for value in values]  # type: ignore[arg-type]

    async def checkpoints(self, tenant: str, session_id: str) -> list[Checkpoint]:
        values = await self._call(_read_checkpoints, tenant, session_id, inline=False)
        return [Checkpoint.from_dict(orjson.loads(value)) for value in values]

    async def commit(
        self,
        meta: SessionMeta,
        expected_version: int,
        keep: int,
        appended: Sequence[StoredMessage],
        checkpoints: Sequence[Checkpoint] = (),
    ) -> bool:
        """Compare-and-set; False if someone else wrote (or deleted) the session first."""
        entries, summaries = await serialized(appended), await serialized(checkpoints)
        small = len(entries) + len(summaries) <= _INLINE_KEYS
        done = await self._call(
            self._commit, meta, expected_version, keep, entries, summaries, inline=small
        )
        if done:
            self._commits += 1
            if self._ttl and self._commits % _EXPIRE_EVERY == 0:
                await self._call(lambda cache: cache.expire(), inline=False)
        return done

    async def delete(self, tenant: str, session_id: str) -> bool:
        return await self._call(_remove, tenant, session_id, inline=False)

    async def ping(self) -> bool:
        try:
            await self._call(_get, "ping", inline=False)
        except Exception:
            return False
        return True

    async def close(self) -> None:
        await self._call(lambda cache: cache.close(), inline=False)  # a connection a thread
        self._quick.close()
        self._patient.close()
        self._thread.shutdown(wait=False)

    async def try_lock(self, tenant: str, session_id: str, seconds: float) -> str | None:
        token = secrets.token_hex(16)
        key = _lock_key(tenant, session_id)
        added = await self._call(lambda cache: cache.add(key, token, expire=seconds))
        return token if added else None

    async def unlock(self, tenant: str, session_id: str, token: str) -> None:
        await self._call(_unlock, _lock_key(tenant, session_id), token)

    def _commit(
        self,
        cache: Cache,
        meta: SessionMeta,
        expected: int,
        keep: int,
        entries: list[bytes],
        summaries: list[bytes],
    ) -> bool:
        tenant, session_id = meta.tenant, meta.session_id
        now = time.time()
        with cache.transact():
            raw = cache.get(_meta_key(tenant, session_id))
            stored = orjson.loads(raw) if raw is not None else None
            if (stored["version"] if stored else 0) != expected:
                return False
            if stored is not None:
                _drop(cache, tenant, session_id, stored, meta.length, meta.checkpoints)
            refreshed = stored.get(_REFRESHED, 0.0) if stored else 0.0
            if self._ttl and refreshed < now + self._ttl:  # at most once per TTL
                if stored is not None:
                    kept = min(meta.checkpoints, stored["checkpoints"])
                    self._refresh(cache, tenant, session_id, keep, kept)
                refreshed = now + 2 * self._ttl
            for index, entry in enumerate(entries, start=keep):
                self._set(cache, _message_key(tenant, session_id, index), entry)
            first = meta.checkpoints - len(summaries)
            for index, summary in enumerate(summaries, start=first):
                self._set(cache, _checkpoint_key(tenant, session_id, index), summary)
            self._set_meta(cache, meta, refreshed)
            if stored is None:
                cache.delete(_legacy_key(tenant, session_id))
        return True

    def _set(self, cache: Cache, key: str, value: bytes) -> None:
        """A message or checkpoint key: twice the TTL (see the module docstring)."""
        cache.set(key, value, expire=2 * self._ttl if self._ttl else None)

    def _set_meta(self, cache: Cache, meta: SessionMeta, refreshed: float) -> None:
        record = orjson.dumps(meta.to_dict() | {_REFRESHED: refreshed})
        cache.set(_meta_key(meta.tenant, meta.session_id), record, expire=self._ttl)

    def _refresh(
        self, cache: Cache, tenant: str, session_id: str, messages: int, checkpoints: int
    ) -> None:
        """Extend every message and checkpoint key that stays."""
        seconds = 2 * self._ttl if self._ttl else None
        for index in range(messages):
            cache.touch(_message_key(tenant, session_id, index), seconds)
        for index in range(checkpoints):
            cache.touch(_checkpoint_key(tenant, session_id, index), seconds)

    async def _legacy(self, tenant: str, session_id: str) -> SessionMeta | None:
        """A session written by release 0.1 (one JSON value per session): converted to
        this layout on first read, in one transaction."""
        from proxy.stores.legacy import convert

        raw = await self._call(_get, _legacy_key(tenant, session_id))
        if raw is None:
            return None
        meta, messages, checkpoints = convert(orjson.loads(raw))
        converted = meta.evolve(checkpoints=len(checkpoints))

        def write(cache: Cache) -> None:
            with cache.transact():
                if cache.get(_meta_key(tenant, session_id)) is not None:
                    return  # converted meanwhile by another worker
                for index, message in enumerate(messages):
                    key = _message_key(tenant, session_id, index)
                    self._set(cache, key, orjson.dumps(message.to_dict()))
                for index, item in enumerate(checkpoints):
                    key = _checkpoint_key(tenant, session_id, index)
                    self._set(cache, key, orjson.dumps(item.to_dict()))
                self._set_meta(cache, converted, time.time() + 2 * self._ttl if self._ttl else 0)
                cache.delete(_legacy_key(tenant, session_id))

        await self._call(write, inline=False)
        return await self.load(tenant, session_id)


def _get(cache: Cache, key: str) -> Any:
    return cache.get(key)


def _get_all(cache: Cache, keys: list[str]) -> list[Any]:
    with cache.transact():
        return [cache.get(key) for key in keys]


def _read_checkpoints(cache: Cache, tenant: str, session_id: str) -> list[bytes]:
    with cache.transact():
        raw = cache.get(_meta_key(tenant, session_id))
        count = orjson.loads(raw)["checkpoints"] if raw is not None else 0
        keys = [_checkpoint_key(tenant, session_id, i) for i in range(count)]
        return [value for value in map(cache.get, keys) if value is not None]


def _remove(cache: Cache, tenant: str, session_id: str) -> bool:
    with cache.transact():
        raw = cache.get(_meta_key(tenant, session_id))
        if raw is None:
            return bool(cache.delete(_legacy_key(tenant, session_id)))
        _drop(cache, tenant, session_id, orjson.loads(raw), 0, 0)
        return bool(cache.delete(_meta_key(tenant, session_id)))


def _drop(
    cache: Cache,
    tenant: str,
    session_id: str,
    stored: dict[str, Any],
    length: int,
    checkpoints: int,
) -> None:
    """Remove the messages and checkpoints beyond new ends (a fork, or a delete)."""
    for index in range(length, stored["length"]):
        cache.delete(_message_key(tenant, session_id, index))
    for index in range(checkpoints, stored["checkpoints"]):
        cache.delete(_checkpoint_key(tenant, session_id, index))


def _unlock(cache: Cache, key: str, token: str) -> None:
    with cache.transact():
        if cache.get(key) == token:
            cache.delete(key)


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
