"""Session store backends (see proxy.sessions.SessionStore)."""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

from proxy import metrics
from proxy.config import SessionSettings
from proxy.sessions import Session, SessionStore
from proxy.stores.disk import DiskSessionStore

__all__ = ["DiskSessionStore", "TimedStore", "open_store", "tenant_secret"]

T = TypeVar("T")


def open_store(settings: SessionSettings) -> SessionStore:
    """The store the config names, with its operations timed."""
    if settings.store == "redis":
        from proxy.stores.redis import RedisSessionStore

        return TimedStore(RedisSessionStore(settings.redis_url, settings.ttl_seconds), "redis")
    return TimedStore(DiskSessionStore(settings.path, settings.ttl_seconds), "disk")


class TimedStore:
    """A SessionStore that records each operation's latency."""

    def __init__(self, inner: SessionStore, name: str) -> None:
        self.inner = inner
        self._timers = {
            operation: metrics.STORE_DURATION.labels(name, operation)
            for operation in ("get", "put", "delete", "ping")
        }

    async def _timed(self, operation: str, call: Awaitable[T]) -> T:
        started = time.perf_counter()
        try:
            return await call
        finally:
            self._timers[operation].observe(time.perf_counter() - started)

    async def get(self, tenant: str, session_id: str) -> Session | None:
        return await self._timed("get", self.inner.get(tenant, session_id))

    async def put(self, session: Session, expected_version: int) -> bool:
        return await self._timed("put", self.inner.put(session, expected_version))

    async def delete(self, tenant: str, session_id: str) -> bool:
        return await self._timed("delete", self.inner.delete(tenant, session_id))

    async def ping(self) -> bool:
        return await self._timed("ping", self.inner.ping())

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name: str) -> object:
        """Backend extras (the Redis store's `try_lock`/`unlock`) pass through."""
        return getattr(self.inner, name)


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
