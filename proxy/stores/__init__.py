"""Session store backends (see proxy.sessions.SessionStore)."""

from __future__ import annotations

from proxy.config import SessionSettings
from proxy.sessions import SessionStore
from proxy.stores.disk import DiskSessionStore

__all__ = ["DiskSessionStore", "open_store"]


def open_store(settings: SessionSettings) -> SessionStore:
    """The store the config names."""
    if settings.store == "redis":
        from proxy.stores.redis import RedisSessionStore

        return RedisSessionStore(settings.redis_url, settings.ttl_seconds)
    return DiskSessionStore(settings.path, settings.ttl_seconds)
