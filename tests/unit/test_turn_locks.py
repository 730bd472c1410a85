"""The turn lock: one turn per session at a time, waiters served in turn, a bounded wait,
and a lease that is given back however its turn ends."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import pytest

from proxy.errors import ProxyError
from proxy.stores import DiskSessionStore
from proxy.turn_locks import TurnLocks
from tests.waiting import eventually_async

KEY = ("t1", "s")


async def test_turns_of_one_session_run_one_at_a_time_in_order(tmp_path: Path) -> None:
    store = DiskSessionStore(str(tmp_path))
    locks = TurnLocks(store, wait_seconds=10)
    ran: list[str] = []

    async def turn(name: str) -> bool:
        lease = await locks.acquire(KEY)
        ran.append(f"{name}+")
        await asyncio.sleep(0.01)
        ran.append(f"{name}-")
        await locks.release(lease)
        return lease.contended

    first = asyncio.create_task(turn("a"))
    await asyncio.sleep(0)
    contended = await asyncio.gather(first, turn("b"), turn("c"))
    assert ran == ["a+", "a-", "b+", "b-", "c+", "c-"]
    assert contended == [False, True, True]
    other = await locks.acquire(("t1", "another"))  # other sessions never wait
    assert not other.contended
    await store.close()


async def test_a_turn_held_in_another_process_is_waited_for_then_a_409(tmp_path: Path) -> None:
    here, there = DiskSessionStore(str(tmp_path)), DiskSessionStore(str(tmp_path))
    token = await there.try_lock(*KEY, 30, "turn")
    assert token is not None
    with pytest.raises(ProxyError) as raised:
        await TurnLocks(here, wait_seconds=0.3).acquire(KEY)
    assert (raised.value.status_code, raised.value.code) == (409, "session_busy")
    await there.unlock(*KEY, token, "turn")
    lease = await TurnLocks(here, wait_seconds=0.3).acquire(KEY)
    assert not lease.contended
    await here.close()
    await there.close()


async def test_a_lease_dropped_unreleased_lets_the_next_turn_go(tmp_path: Path) -> None:
    """A bug that drops a turn without releasing it must not block its session for good:
    the local queue moves on at once, the store lease lapses unrenewed."""
    store = DiskSessionStore(str(tmp_path))
    locks = TurnLocks(store, wait_seconds=10)
    lease = await locks.acquire(KEY)
    await store.unlock(*KEY, lease.token, "turn")  # as if it had lapsed in the store
    del lease
    gc.collect()
    again = await asyncio.wait_for(locks.acquire(KEY), 2)
    await locks.release(again)
    await store.close()


async def test_a_lease_the_store_could_not_take_back_is_given_back_before_the_next(
    tmp_path: Path,
) -> None:
    store = DiskSessionStore(str(tmp_path))
    locks = TurnLocks(store, wait_seconds=0.5)
    lease = await locks.acquire(KEY)
    real_unlock = store.unlock

    async def failing(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    store.unlock = failing  # type: ignore[method-assign]
    await locks.release(lease)  # logged, not raised: the turn itself is over
    store.unlock = real_unlock  # type: ignore[method-assign]
    again = await locks.acquire(KEY)  # not a 409 after waiting out the lease
    await locks.release(again)
    await store.close()


async def test_a_turn_cancelled_while_asking_the_store_leaves_no_lease(tmp_path: Path) -> None:
    """Its client left while the store was granting the lease: the grant is given back
    once it has landed (well before it would lapse), and this process's next turn of
    the session is not kept waiting by it at all."""

    class SlowToGrant(DiskSessionStore):
        async def try_lock(self, *args: Any, **kwargs: Any) -> str | None:
            token = await super().try_lock(*args, **kwargs)
            await asyncio.sleep(0.2)  # granted, not yet returned
            return token

    store = SlowToGrant(str(tmp_path))
    locks = TurnLocks(store, wait_seconds=1)
    asking = asyncio.create_task(locks.acquire(KEY))
    await asyncio.sleep(0.05)
    asking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asking
    plain = DiskSessionStore(str(tmp_path))

    async def given_back() -> bool:
        token = await plain.try_lock(*KEY, 30, "turn")
        if token is not None:
            await plain.unlock(*KEY, token, "turn")
        return token is not None

    await eventually_async(given_back, "the abandoned grant to be given back", seconds=5)
    await plain.close()

    asking = asyncio.create_task(locks.acquire(KEY))
    await asyncio.sleep(0.05)
    asking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asking
    await asyncio.sleep(0.3)  # the grant has landed; it is not given back yet
    lease = await asyncio.wait_for(locks.acquire(KEY), 0.5)  # the next turn here goes
    await locks.release(lease)
    await store.close()
