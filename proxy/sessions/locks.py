"""One turn at a time per session, across every worker and replica.

A turn holds its session's turn lock from before it reads the session until its reply
is stored (the commit gives it back), so a turn is never refused after its upstream
call was paid. The store decides what the lock is: Redis, a key that lapses
`LEASE_SECONDS` after it was last renewed (one task renews every lock this process
holds, all at once every quarter of that, and only those some turn still refers to, so
one dropped by a bug lapses too): a replica killed mid-turn frees its sessions for the
others within `LEASE_SECONDS`; the disk store, a file lock the kernel drops with its
process, at once. In front of it, waiters of one process queue on a local lock, so only
one of them asks the store; they ask it every `_POLL_MOST` seconds at most, so a lapsed
lease is taken within that.

A lease can lapse while its turn still runs (its process stalled past the lease: a
blocked event loop, a frozen VM). The store's commit is fenced on it: a turn whose lock
another turn holds now, or whose session another turn changed since its lock lapsed, is
refused (`LeaseLost`, a 409) and stores nothing, so no turn is ever stored over
another's, lost or doubled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from proxy.errors import SessionConflict
from proxy.sessions.records import SessionKey
from proxy.sessions.store import LockStore

__all__ = ["Lease", "TurnLocks"]

logger = logging.getLogger("context_proxy.turn_locks")

LEASE_SECONDS = 4.5  # a lease not renewed (its process gone) lapses after this: within 5 s
_RENEWALS = 4  # renewals per lease period: a stall of up to 3/4 of it loses no lease
_POLL_FIRST, _POLL_MOST = 0.005, 0.1  # seconds between asks while another process holds it
_SETTLE_SECONDS = 1.0  # for an ask its turn abandoned to be answered, before giving it back


@dataclass(eq=False)
class Lease:
    """A held turn lock. `contended`: the turn had to wait for another one."""

    key: SessionKey
    token: str
    contended: bool
    released: bool = False
    stored: bool = False  # the store gave it back with the turn's commit
    lapsed: bool = False  # a renewal found it gone: its commit is fenced (see above)
    _dropped: weakref.finalize | None = field(default=None, repr=False)


class TurnLocks:
    """The turn locks of one process. `clock` (monotonic seconds) times a turn's wait for
    its lock and the leases' renewals; a lease's own term runs on the store's clock."""

    def __init__(
        self,
        *,
        store: LockStore,
        wait_seconds: float,
        lease_seconds: float = LEASE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._wait = wait_seconds
        self._lease_seconds = lease_seconds
        self._clock = clock
        self._local: dict[SessionKey, tuple[asyncio.Lock, int]] = {}
        self._held: weakref.WeakSet[Lease] = weakref.WeakSet()
        # Leases this process could not give back (the store failing): given back before
        # the session's next turn here asks for one, rather than left to lapse.
        self._unreleased: dict[SessionKey, str] = {}
        self._giving_back: set[asyncio.Task[None]] = set()
        self._renewer: asyncio.Task[None] | None = None

    async def acquire(self, key: SessionKey) -> Lease:
        """The session's lease, once every earlier turn of it has finished; a 409
        `session_busy` after `wait_seconds`."""
        deadline = self._clock() + self._wait
        lock, users = self._local.get(key) or (asyncio.Lock(), 0)
        self._local[key] = (lock, users + 1)
        try:
            contended = lock.locked()
            if not contended:
                await lock.acquire()  # free: taken at once, no task, no timer
            else:
                try:
                    await asyncio.wait_for(lock.acquire(), self._wait)
                except TimeoutError:
                    raise _busy() from None
            try:
                token, waited = await self._store_lease(key, deadline)
            except BaseException:
                lock.release()
                raise
        except BaseException:
            self._forget(key)
            raise
        lease = Lease(key, token, contended or waited)
        lease._dropped = weakref.finalize(lease, self._let_go, key, lock)
        self._held.add(lease)
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(self._renew())
        return lease

    async def release(self, lease: Lease) -> None:
        """Give the lease back (idempotent); the next turn of the session may start."""
        if lease.released:
            return
        lease.released = True
        self._held.discard(lease)
        try:
            if not lease.stored:
                await self._store.unlock(*lease.key, lease.token, name="turn")
        except Exception as exc:
            logger.warning("turn lock not released: %s", type(exc).__name__)
            self._unreleased[lease.key] = lease.token
        finally:
            if lease._dropped is not None:
                lease._dropped()  # lets the next turn of this process go

    def _let_go(self, key: SessionKey, lock: asyncio.Lock) -> None:
        """The local half of a release, also run if a lease is dropped unreleased (its
        store half then lapses unrenewed)."""
        lock.release()
        self._forget(key)

    async def _store_lease(self, key: SessionKey, deadline: float) -> tuple[str, bool]:
        stale = self._unreleased.pop(key, None)
        if stale is not None:
            try:
                await self._store.unlock(*key, stale, name="turn")
            except BaseException:
                self._unreleased[key] = stale
                raise
        pause, waited = _POLL_FIRST, False
        while True:
            token = await self._try_lock(key)
            if token is not None:
                return token, waited
            if self._clock() + pause > deadline:
                raise _busy()
            waited = True
            await asyncio.sleep(pause)
            pause = min(2 * pause, _POLL_MOST)

    async def _try_lock(self, key: SessionKey) -> str | None:
        """One ask. If the turn is cancelled meanwhile (its client left), the store may
        still grant it (in its thread, or Redis after the connection dropped): the
        token, chosen here, is given back once that has settled, and before this
        process's next turn of the session, rather than left to lapse."""
        token = secrets.token_hex(16)
        try:
            return await self._store.try_lock(*key, self._lease_seconds, name="turn", token=token)
        except asyncio.CancelledError:
            self._unreleased[key] = token
            give_back = asyncio.get_running_loop().create_task(self._give_back(key, token))
            self._giving_back.add(give_back)
            give_back.add_done_callback(self._giving_back.discard)
            raise

    async def _give_back(self, key: SessionKey, token: str) -> None:
        await asyncio.sleep(_SETTLE_SECONDS)
        if self._unreleased.get(key) == token:
            with contextlib.suppress(Exception):
                await self._store.unlock(*key, token, name="turn")
                del self._unreleased[key]

    async def _renew(self) -> None:
        """Extend every held lease `_RENEWALS` times per lease period, while any is held:
        all of them at once, so one slow answer delays no other lease's renewal."""
        every = self._lease_seconds / _RENEWALS
        due = self._clock() + every
        while self._held:
            await asyncio.sleep(max(0.0, due - self._clock()))
            due = self._clock() + every  # a round's own time comes off the pause after it
            held = [lease for lease in self._held if not (lease.stored or lease.released)]
            await asyncio.gather(*(self._extend(lease) for lease in held))

    async def _extend(self, lease: Lease) -> None:
        try:
            kept = await self._store.extend(
                *lease.key, lease.token, self._lease_seconds, name="turn"
            )
        except Exception as exc:  # the next round tries again; all failing, it lapses
            logger.debug("turn lock not renewed: %s", type(exc).__name__)
            return
        if kept or lease.lapsed:
            return
        await asyncio.sleep(_SETTLE_SECONDS / 10)  # not the commit's own give-back, racing it?
        if not (lease.stored or lease.released):
            lease.lapsed = True
            logger.warning(
                "a turn lock lapsed while its turn ran (a stall past %.1f s): its commit is"
                " refused if another turn of the session went ahead",
                self._lease_seconds,
            )

    def _forget(self, key: SessionKey) -> None:
        lock, users = self._local[key]
        if users > 1:
            self._local[key] = (lock, users - 1)
        else:
            del self._local[key]


def _busy() -> SessionConflict:
    return SessionConflict(
        "Another turn of this session is still running; retry when it has finished.",
        code="session_busy",
        retry_after="1",
    )
