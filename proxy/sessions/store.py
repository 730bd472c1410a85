"""The session store's protocol: what every backend (`proxy.sessions.stores`) promises.

Append-only: a turn writes its new messages, the meta record, its plan record and (when
they changed) the session's inserts, under compare-and-set on the version; nothing else
is rewritten. `tests/unit/test_store_contract.py` checks each backend against it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from proxy.sessions.records import Checkpoint, LockName, SessionMeta, StoredMessage

__all__ = ["SessionStore"]


class SessionStore(Protocol):
    """Append-only session storage. A turn writes its new messages and the meta record,
    under compare-and-set on the version; nothing else is rewritten."""

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

    async def commit(
        self,
        meta: SessionMeta,
        expected_version: int,
        keep: int,
        appended: Sequence[StoredMessage],
        checkpoints: Sequence[Checkpoint] = (),
        release: str | None = None,
        plan: bytes | None = None,
        inserts: bytes | None = None,
    ) -> bool:
        """Compare-and-set (0 = absent): the transcript becomes its first `keep` messages
        plus `appended` (so `meta.length == keep + len(appended)`), the checkpoints their
        first `meta.checkpoints - len(checkpoints)` plus `checkpoints`, the meta `meta`;
        the turn's plan record (`plan`) joins the session's newest `PLANS_KEPT`; the
        session's `Inserts` become `inserts`, where given (`meta.inserts` its digest); once
        stored, the turn lock held by the token `release` (if given) is given back with
        it. False if another writer changed the session first; with `release`, refused
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

    async def memory(self, tenant: str, memory_id: str) -> tuple[int, bytes] | None:
        """(version, data) of a memory shared across sessions, or None."""
        ...

    async def put_memory(self, tenant: str, memory_id: str, expected: int, data: bytes) -> bool:
        """Compare-and-set (0 = absent): store `data` as version `expected + 1`."""
        ...

    async def delete_memory(self, tenant: str, memory_id: str) -> bool: ...

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
