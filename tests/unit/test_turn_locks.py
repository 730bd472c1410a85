"""The turn lock: one turn per session at a time, waiters served in turn, a bounded wait,
and a lease that is given back however its turn ends."""

from __future__ import annotations

import asyncio
import gc
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from proxy.errors import SessionConflict
from proxy.sessions import locks as locks_module
from proxy.sessions.locks import LEASE_SECONDS, TurnLocks
from proxy.sessions.records import Commit
from proxy.sessions.stores import DiskSessionStore, LeaseLost
from proxy.sessions.stores.redis import RedisSessionStore
from tests.clock import Clock
from tests.unit.sessions_factory import entries, meta
from tests.waiting import eventually, eventually_async

KEY = ("t1", "s")
LEASE = 0.4  # a short lease, so a test outlives several of its periods in seconds


@pytest.fixture
async def redis_stores(redis_url: str) -> AsyncIterator[Callable[[], RedisSessionStore]]:
    """Redis stores sharing a key prefix of their own: each one a replica's. `make.lock`:
    the Redis key of KEY's turn lock."""
    prefix = f"cp-test-{uuid.uuid4().hex}"
    stores: list[RedisSessionStore] = []

    def make() -> RedisSessionStore:
        stores.append(RedisSessionStore(redis_url, prefix=prefix))
        return stores[-1]

    make.lock = f"{prefix}:{{{KEY[0]}:{KEY[1]}}}:turn"  # type: ignore[attr-defined]
    make.url = redis_url  # type: ignore[attr-defined]
    yield make
    for store in stores:
        await store.close()


async def test_turns_of_one_session_run_one_at_a_time_in_order(tmp_path: Path) -> None:
    store = DiskSessionStore(str(tmp_path))
    locks = TurnLocks(store=store, wait_seconds=10)
    ran: list[str] = []

    async def turn(name: str) -> bool:
        lease = await locks.acquire(KEY)
        ran.append(f"{name}+")
        await asyncio.sleep(0)  # the others run meanwhile: they find the lock held
        ran.append(f"{name}-")
        await locks.release(lease)
        return lease.contended

    # Started in this order: "a" runs first and takes the lock at once.
    turns = [asyncio.create_task(turn(name)) for name in "abc"]
    contended = await asyncio.gather(*turns)
    assert ran == ["a+", "a-", "b+", "b-", "c+", "c-"]
    assert list(contended) == [False, True, True]  # typeshed types gather's list a tuple
    other = await locks.acquire(("t1", "another"))  # other sessions never wait
    assert not other.contended
    await store.close()


class Asked(DiskSessionStore):
    """A disk store that counts the turn locks asked of it."""

    asked = 0

    async def try_lock(self, *args: Any, **kwargs: Any) -> str | None:
        self.asked += 1
        return await super().try_lock(*args, **kwargs)


async def test_a_turn_held_in_another_process_is_waited_for_then_a_409(tmp_path: Path) -> None:
    """The store is asked again and again while the other process holds the session, and
    the turn is a 409 once its wait is over (on a clock that moves 10 s a reading)."""
    here, there = Asked(str(tmp_path)), DiskSessionStore(str(tmp_path))
    token = await there.try_lock(*KEY, 30, "turn")
    assert token is not None
    clock = Clock()

    def ticking() -> float:
        clock.advance(10)
        return clock()

    with pytest.raises(SessionConflict) as raised:
        await TurnLocks(store=here, wait_seconds=30, clock=ticking).acquire(KEY)
    assert (raised.value.code, raised.value.retry_after) == ("session_busy", "1")
    assert here.asked >= 2
    await there.unlock(*KEY, token, "turn")
    lease = await TurnLocks(store=here, wait_seconds=30, clock=ticking).acquire(KEY)
    assert not lease.contended
    await here.close()
    await there.close()


async def test_a_turn_waiting_on_another_process_goes_once_it_gives_the_session_back(
    tmp_path: Path,
) -> None:
    here, there = Asked(str(tmp_path)), DiskSessionStore(str(tmp_path))
    token = await there.try_lock(*KEY, 30, "turn")
    assert token is not None
    waiting = asyncio.create_task(TurnLocks(store=here, wait_seconds=60).acquire(KEY))

    async def asked_twice() -> bool:
        return here.asked >= 2

    await eventually_async(asked_twice, "the waiting turn to ask the store again")
    assert not waiting.done()
    await there.unlock(*KEY, token, "turn")
    lease = await waiting
    assert lease.contended
    await here.close()
    await there.close()


async def test_a_lease_dropped_unreleased_lets_the_next_turn_go(tmp_path: Path) -> None:
    """A bug that drops a turn without releasing it must not block its session for good:
    the local queue moves on at once, the store lease lapses unrenewed."""
    store = DiskSessionStore(str(tmp_path))
    locks = TurnLocks(store=store, wait_seconds=10)
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
    locks = TurnLocks(store=store, wait_seconds=0.5)
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


async def test_a_turn_cancelled_while_asking_the_store_leaves_no_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its client left while the store was granting the lease: the grant is given back
    once it has landed (well before it would lapse), and this process's next turn of
    the session is not kept waiting by it at all."""

    class SlowToGrant(DiskSessionStore):
        """Grants the lock, then answers only once `slow` is off (or the ask is
        cancelled)."""

        slow = True
        granted = asyncio.Event()
        answer = asyncio.Event()

        async def try_lock(self, *args: Any, **kwargs: Any) -> str | None:
            token = await super().try_lock(*args, **kwargs)
            if self.slow:
                self.granted.set()
                await self.answer.wait()  # granted, not yet returned
            return token

    store = SlowToGrant(str(tmp_path))
    locks = TurnLocks(store=store, wait_seconds=1)
    asking = asyncio.create_task(locks.acquire(KEY))
    await asyncio.wait_for(store.granted.wait(), 10)
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

    # Again, and this time the grant is not given back by itself while the test runs:
    # the next turn here gives it back before it asks (else, a 409 after its wait).
    monkeypatch.setattr(locks_module, "_SETTLE_SECONDS", 3600)
    store.granted.clear()
    asking = asyncio.create_task(locks.acquire(KEY))
    await asyncio.wait_for(store.granted.wait(), 10)
    asking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asking
    store.slow = False
    lease = await locks.acquire(KEY)  # the next turn here goes
    assert not lease.contended
    await locks.release(lease)
    for giving_back in locks._giving_back:  # the one waiting out its hour
        giving_back.cancel()
    await store.close()


def test_a_dead_replicas_lease_lapses_within_five_seconds() -> None:
    assert LEASE_SECONDS <= 5.0  # issue 36: a replica killed mid-turn frees its sessions


@pytest.mark.integration
async def test_renewal_keeps_a_long_turns_lease_past_several_lease_periods(
    redis_stores: Callable[[], RedisSessionStore],
) -> None:
    """A turn longer than its lease keeps it: renewed while it runs, another replica
    never gets the session meanwhile; given back, it does at once."""
    here, there = redis_stores(), redis_stores()
    lease_seconds = 1.0  # renewed every 0.25 s: a loaded machine's hiccup costs no lease
    locks = TurnLocks(store=here, wait_seconds=10, lease_seconds=lease_seconds)
    lease = await locks.acquire(KEY)
    raw = aioredis.Redis.from_url(redis_stores.url)  # type: ignore[attr-defined]
    seen = {"renewals": 0, "left": await raw.pttl(redis_stores.lock)}  # type: ignore[attr-defined]

    async def renewed_over_four_terms() -> bool:
        assert await there.try_lock(*KEY, 10, "turn") is None  # never the other's
        left = await raw.pttl(redis_stores.lock)  # type: ignore[attr-defined]
        seen["renewals"] += left > seen["left"]  # its time left went up: renewed
        seen["left"] = left
        return seen["renewals"] >= 16  # four a term

    await eventually_async(renewed_over_four_terms, "four terms of renewals", seconds=60)
    await raw.aclose()
    assert not lease.lapsed
    await locks.release(lease)
    assert await there.try_lock(*KEY, 10, "turn") is not None


@pytest.mark.integration
async def test_a_waiter_gets_a_dead_holders_session_as_its_lease_lapses(
    redis_stores: Callable[[], RedisSessionStore],
) -> None:
    """Another replica took the lock and died (never renews it): a turn waiting here gets
    the session once it lapses, not after its whole wait."""
    here, there = redis_stores(), redis_stores()
    token = await there.try_lock(*KEY, LEASE, "turn")
    assert token is not None
    # Its whole wait is a minute; the lapse comes after LEASE (a bound here, not a speed).
    locks = TurnLocks(store=here, wait_seconds=60, lease_seconds=LEASE)
    lease = await asyncio.wait_for(locks.acquire(KEY), 30)
    assert lease.contended
    assert not await there.extend(*KEY, token, 10, "turn")  # the dead holder's had lapsed


@pytest.mark.integration
@pytest.mark.parametrize("b_stored_first", [False, True], ids=["b-running", "b-stored"])
async def test_a_turn_whose_lease_lapsed_in_a_stall_never_commits_over_the_next(
    redis_stores: Callable[[], RedisSessionStore], b_stored_first: bool
) -> None:
    """Replica A's event loop blocks past its turn's lease (a long CPU step, a GC pause)
    and B takes the session. A's commit is refused, whether B's turn still runs or was
    stored already; B's turn is stored once, A's never, B's lock is left alone."""
    a_store, b_store = redis_stores(), redis_stores()
    seed = entries("seed", "echo: seed")
    assert await a_store.commit(Commit(meta(seed), 0, 0, seed))
    a_locks = TurnLocks(store=a_store, wait_seconds=10, lease_seconds=LEASE)
    b_locks = TurnLocks(store=b_store, wait_seconds=10, lease_seconds=LEASE)

    def turn(text: str) -> tuple[list[Any], Any]:
        added = entries(text, f"echo: {text}", start=2, head=seed[-1].chain)
        return added, meta([*seed, *added], version=2)

    a_lease = await a_locks.acquire(KEY)
    # The loop blocked (nothing renews the lease) until the lease has lapsed in Redis.
    raw = redis.Redis.from_url(redis_stores.url)  # type: ignore[attr-defined]
    eventually(lambda: not raw.exists(redis_stores.lock), "A's lease to lapse")  # type: ignore[attr-defined]
    raw.close()
    b_lease = await asyncio.wait_for(b_locks.acquire(KEY), 1)
    a_added, a_meta = turn("from a")
    b_added, b_meta = turn("from b")
    if b_stored_first:  # B's turn stored, its lock given back with it, before A commits
        assert await b_store.commit(Commit(b_meta, 1, 2, b_added, release=b_lease.token))
        b_lease.stored = True
    with pytest.raises(LeaseLost):
        await a_store.commit(Commit(a_meta, 1, 2, a_added, release=a_lease.token))

    async def lapsed() -> bool:
        return a_lease.lapsed

    await eventually_async(lapsed, "A's renewer to find its lease gone", seconds=2)
    await a_locks.release(a_lease)  # gives nothing of B's back
    if not b_stored_first:
        assert await a_store.try_lock(*KEY, 10, "turn") is None  # still B's
        assert await b_store.commit(Commit(b_meta, 1, 2, b_added, release=b_lease.token))
        b_lease.stored = True
    await b_locks.release(b_lease)
    stored = await a_store.messages(*KEY, 0, 4)
    assert [m.message["content"] for m in stored] == [
        "seed",
        "echo: seed",
        "from b",
        "echo: from b",
    ]
    assert (await a_store.load(*KEY)).version == 2  # type: ignore[union-attr]
