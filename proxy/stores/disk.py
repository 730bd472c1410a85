"""Session store on local disk (diskcache over SQLite).

SQLite locking makes it safe for several worker processes sharing one
directory.  Sessions are history, not cache: nothing is ever evicted for size;
only TTL expiry and explicit delete remove a session.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
import diskcache
import orjson

from proxy.sessions import Session

__all__ = ["DiskSessionStore"]

_NO_SIZE_LIMIT = 2**62
# diskcache keeps values above `disk_min_file_size` in separate files and deletes the
# old file on overwrite, so a read racing a write can find the file gone and report
# a miss: a stored session would look absent. Kept inline, every read is one atomic
# SQLite row.
_ALWAYS_INLINE = 2**40


class DiskSessionStore:
    """SessionStore on diskcache; values are orjson bytes, the version is kept as the tag.

    The TTL restarts on every successful put (i.e. every conversation turn).
    """

    def __init__(self, directory: str, ttl_seconds: float | None = None) -> None:
        # eviction_policy="none" disables size-based culling entirely; the huge
        # size_limit is a second guard.  Expired entries are still purged.
        self._cache = diskcache.Cache(
            directory,
            eviction_policy="none",
            size_limit=_NO_SIZE_LIMIT,
            disk_min_file_size=_ALWAYS_INLINE,
        )
        self._ttl = ttl_seconds

    async def get(self, tenant: str, session_id: str) -> Session | None:
        raw = await anyio.to_thread.run_sync(self._cache.get, _key(tenant, session_id))
        return None if raw is None else Session.from_dict(orjson.loads(raw))

    async def put(self, session: Session, expected_version: int) -> bool:
        """Compare-and-set; False if someone else wrote (or deleted) the session first."""
        key = _key(session.tenant, session.session_id)
        data = orjson.dumps(session.to_dict())
        put = self._put
        return await anyio.to_thread.run_sync(put, key, data, session.version, expected_version)

    async def delete(self, tenant: str, session_id: str) -> bool:
        key = _key(tenant, session_id)
        return await anyio.to_thread.run_sync(lambda: self._cache.delete(key, retry=True))

    async def ping(self) -> bool:
        try:
            await anyio.to_thread.run_sync(self._cache.get, "ping")
        except Exception:
            return False
        return True

    async def close(self) -> None:
        self._cache.close()

    def _put(self, key: str, data: bytes, version: int, expected: int) -> bool:
        with self._cache.transact(retry=True):
            value, stored_version = self._cache.get(key, default=None, read=True, tag=True)
            _close(value)
            if (stored_version if value is not None else 0) != expected:
                return False
            self._cache.set(key, data, expire=self._ttl, tag=version)
            return True


def _key(tenant: str, session_id: str) -> str:
    # Tenants never contain ":" (see tenant_id), so the first ":" splits the key
    # unambiguously and user-chosen session ids cannot reach another tenant.
    if ":" in tenant:
        raise ValueError("tenant must not contain ':'")
    return f"{tenant}:{session_id}"


def _close(value: Any) -> None:
    # With read=True, large values come back as open file handles.
    close = getattr(value, "close", None)
    if close is not None:
        close()
