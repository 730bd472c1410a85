"""The session store's protocol: what every backend (`proxy.sessions.stores`) promises.

Append-only: a turn writes its new messages, the meta record, its plan record and (when
they changed) the session's inserts, under compare-and-set on the version; nothing else
is rewritten. `tests/unit/test_store_contract.py` checks each backend against it.
"""

from __future__ import annotations

from typing import Protocol

from proxy.sessions.records import Checkpoint, Commit, LockName, SessionMeta, StoredMessage

__all__ = ["LockStore", "MemoryStore", "MessageLog", "SessionStore", "StoreHealth"]


class MessageLog(Protocol):
    """Append-only sessions: a turn writes its new messages and the meta record, under
    compare-and-set on the version; nothing else is rewritten."""

    async def load(self, tenant: str, session_id: str) -> SessionMeta | None:
        """The meta record, or None for a session that does not exist."""
        ...

    async def messages(
        self, tenant: str, session_id: str, start: int, end: int
    ) -> list[StoredMessage]:
        """transcript[start:end] (of the stored version)."""
        ...

    async def checkpoints(self, tenant: str, session_id: str, start: int = 0) -> list[Checkpoint]:
        """The stored summary checkpoints from the `start`-th on, oldest first."""
        ...

    async def commit(self, change: Commit) -> bool:
        """Store `change` (`Commit`) if the session is still at its expected version.
        False if another writer changed the session first; with a `release`, refused
        (`LeaseLost`) if another token holds that turn lock, or if the session moved and
        the lock is no longer its own. Applied within `COMMIT_SECONDS` or never:
        `LateCommit` if the store got to it later."""
        ...

    async def plans(self, tenant: str, session_id: str) -> list[bytes]:
        """The session's newest plan records, oldest first."""
        ...

    async def inserts(self, tenant: str, session_id: str) -> bytes | None:
        """The session's `Inserts` as last committed, or None."""
        ...

    async def delete(self, tenant: str, session_id: str) -> bool: ...

    async def sessions(
        self, tenant: str | None, after: tuple[str, str] | None, limit: int
    ) -> list[SessionMeta]:
        """Up to `limit` live sessions of `tenant` (None: every tenant), in (tenant,
        session id) order, starting after the key `after`."""
        ...


class MemoryStore(Protocol):
    """Memories shared across a tenant's sessions, each one record under compare-and-set."""

    async def memory(self, tenant: str, memory_id: str) -> tuple[int, bytes] | None:
        """(version, data) of a memory shared across sessions, or None."""
        ...

    async def put_memory(self, tenant: str, memory_id: str, expected: int, data: bytes) -> bool:
        """Compare-and-set (0 = absent): store `data` as version `expected + 1`."""
        ...

    async def delete_memory(self, tenant: str, memory_id: str) -> bool: ...


class StoreHealth(Protocol):
    """Whether the store can take a turn now, checked before the upstream is paid."""

    async def writable(self, need: int = 0) -> None:
        """Raise (a store fault) if a turn writing up to `need` bytes could not be stored
        now, where a read would not show it (the disk store's file removed or replaced,
        its filesystem read-only or full; Redis at its maxmemory): checked before the
        upstream is paid."""
        ...

    async def ping(self) -> None:
        """Raise (a store fault) unless the store can be reached and takes a real write."""
        ...

    async def close(self) -> None: ...


class LockStore(Protocol):
    """A session's locks (`LockName`), which expire so a crashed holder cannot keep one."""

    async def try_lock(
        self,
        tenant: str,
        session_id: str,
        seconds: float,
        name: LockName,
        token: str | None = None,
    ) -> str | None:
        """A token for `unlock` (`token` if given, else a new one), or None if another
        holds the session's lock of this name; the lock expires after `seconds`, so a
        crashed holder cannot keep it."""
        ...

    async def extend(
        self, tenant: str, session_id: str, token: str, seconds: float, name: LockName
    ) -> bool:
        """Make a held lock expire `seconds` from now; False if it was no longer held."""
        ...

    async def unlock(self, tenant: str, session_id: str, token: str, name: LockName) -> None: ...


class SessionStore(MessageLog, MemoryStore, StoreHealth, LockStore, Protocol):
    """What every backend is: the four concerns above, each part of the engine typed by
    the one it uses."""
