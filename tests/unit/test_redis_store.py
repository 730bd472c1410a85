"""What only the Redis store has to show: its key layout, appends and expiry, on the real
Redis (each test with its own key prefix)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import orjson
import pytest
import redis.asyncio as aioredis

from proxy.errors import SessionConflict, StoreUnavailable
from proxy.sessions.records import Commit
from proxy.sessions.stores import LeaseLost, TimedStore
from proxy.sessions.stores.redis import RedisSessionStore
from tests.unit.sessions_factory import checkpoint, entries, meta
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration  # a Redis server of the tests' own


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def prefix(raw: aioredis.Redis) -> AsyncIterator[str]:
    prefix = f"cp-test-{uuid.uuid4().hex}"
    yield prefix
    keys = [key async for key in raw.scan_iter(match=f"{prefix}:*")]
    if keys:
        await raw.delete(*keys)


def key(prefix: str, suffix: str) -> str:
    return f"{prefix}:{{t1:s}}:{suffix}"


async def test_layout_is_json_under_one_hash_tag(
    raw: aioredis.Redis, prefix: str, redis_url: str
) -> None:
    store = RedisSessionStore(redis_url, prefix=prefix)
    transcript = entries("u1", "a1")
    summary = checkpoint(transcript, 2)
    assert await store.commit(
        Commit(meta(transcript, checkpoints=[summary]), 0, 0, transcript, [summary])
    )
    assert sorted([k.decode() async for k in raw.scan_iter(match=f"{prefix}:*")]) == [
        f"{prefix}:index",  # the sessions list, of every tenant: one key of its own
        key(prefix, "ckpts"),
        key(prefix, "meta"),
        key(prefix, "msgs"),
    ]
    assert await raw.zrange(f"{prefix}:index", 0, -1) == [b"t1:s"]
    assert [orjson.loads(e) for e in await raw.lrange(key(prefix, "msgs"), 0, -1)] == [
        m.to_dict() for m in transcript
    ]
    data = await raw.hget(key(prefix, "meta"), "data")
    assert data is not None and orjson.loads(data)["length"] == 2
    assert await raw.pttl(key(prefix, "meta")) == -1  # no TTL configured: never expires
    await store.close()


async def test_a_turn_pushes_only_its_new_messages(
    raw: aioredis.Redis, prefix: str, redis_url: str
) -> None:
    store = RedisSessionStore(redis_url, prefix=prefix)
    transcript = entries(*(f"m{i}" for i in range(2500)))  # several RPUSH chunks
    assert await store.commit(Commit(meta(transcript), 0, 0, transcript))
    # Tamper with a stored entry behind the store's back: a rewrite would restore it.
    marker = b'{"marker":true}'
    await raw.lset(key(prefix, "msgs"), 0, marker.decode())  # redis-py types the value str
    more = entries("u", "a", start=2500, head=transcript[-1].chain)
    assert await store.commit(Commit(meta([*transcript, *more], version=2), 1, 2500, more))
    stored = await raw.lrange(key(prefix, "msgs"), 0, -1)
    assert len(stored) == 2502 and stored[0] == marker
    assert [orjson.loads(e) for e in stored[2500:]] == [m.to_dict() for m in more]
    await store.close()


async def test_a_huge_turn_goes_in_whole(raw: aioredis.Redis, prefix: str, redis_url: str) -> None:
    """Every byte of every entry arrives: megabytes, non-ASCII and many (the script
    pushes them a thousand at a time) alike."""
    store = RedisSessionStore(redis_url, prefix=prefix)
    texts = ["", 'naïve ☃ \u0000 "quoted"', "lorem ipsum " * 430_000]
    transcript = entries(*texts, *(f"weather? {i}" for i in range(20_000)))
    summary = checkpoint(transcript, 3, text="s" * 100_000)
    assert await store.commit(
        Commit(meta(transcript, checkpoints=[summary]), 0, 0, transcript, [summary])
    )
    stored = await raw.lrange(key(prefix, "msgs"), 0, -1)
    assert [orjson.loads(e) for e in stored] == [m.to_dict() for m in transcript]
    assert await store.messages("t1", "s", 0, 3) == transcript[:3]
    assert await store.checkpoints("t1", "s") == [summary]
    await store.close()


async def test_every_key_of_a_session_expires_together(
    raw: aioredis.Redis, prefix: str, redis_url: str
) -> None:
    store = RedisSessionStore(redis_url, ttl_seconds=30, prefix=prefix)
    transcript = entries("u1", "a1")
    summary = checkpoint(transcript, 2)
    assert await store.commit(
        Commit(meta(transcript, checkpoints=[summary]), 0, 0, transcript, [summary])
    )
    for suffix in ("meta", "msgs", "ckpts"):
        assert 0 < await raw.pttl(key(prefix, suffix)) <= 30_000
    await store.close()


async def test_ping_says_when_redis_is_unreachable() -> None:
    down = TimedStore(RedisSessionStore("redis://127.0.0.1:9/0"), "redis")
    with pytest.raises(StoreUnavailable) as raised:
        await down.ping()
    assert "unreachable" in raised.value.message
    await down.close()


async def test_a_commit_is_fenced_on_the_turn_lock_it_names(
    raw: aioredis.Redis, prefix: str, redis_url: str
) -> None:
    """Its lock still held, a conflict is a background summary's (the turn is replayed
    onto it); lapsed, the commit applies only if the session has not moved since, and
    never while another holds the lock. Refused, it is a 409 that stores nothing."""
    store = RedisSessionStore(redis_url, prefix=prefix)

    async def lapsed() -> bool:
        return not await raw.exists(key(prefix, "turn"))

    seed = entries("u1", "a1")
    added = entries("u2", "a2", start=2, head=seed[-1].chain)
    assert await store.commit(Commit(meta(seed), 0, 0, seed))
    token = await store.try_lock("t1", "s", 0.3, "turn")
    assert token is not None
    summary = checkpoint(seed, 2)  # a background summary, stored under the turn
    assert await store.commit(
        Commit(meta(seed, version=2, checkpoints=[summary]), 1, 2, [], [summary])
    )
    turn = meta([*seed, *added], version=2, checkpoints=[summary])
    assert not await store.commit(Commit(turn, 1, 2, added, release=token))  # a plain conflict
    await eventually_async(lapsed, "the lease to lapse")  # unrenewed; nobody took it: stored
    turn = meta([*seed, *added], version=3, checkpoints=[summary])
    assert await store.commit(Commit(turn, 2, 2, added, release=token))

    token = await store.try_lock("t1", "s", 0.3, "turn")
    assert token is not None
    await eventually_async(lapsed, "the lease to lapse")  # another turn takes the session
    taken = await store.try_lock("t1", "s", 10, "turn")
    assert taken is not None
    more = entries("u3", "a3", start=4, head=added[-1].chain)
    theirs = meta([*seed, *added, *more], version=4, checkpoints=[summary])
    assert await store.commit(Commit(theirs, 3, 4, more, release=taken))
    ours = entries("mine", "reply", start=4, head=added[-1].chain)
    late = meta([*seed, *added, *ours], version=4, checkpoints=[summary])
    with pytest.raises(LeaseLost):
        await store.commit(Commit(late, 3, 4, ours, release=token))
    again = await store.try_lock("t1", "s", 10, "turn")  # and another holds it now
    assert again is not None
    with pytest.raises(SessionConflict) as raised:
        await TimedStore(store, "redis").commit(Commit(late, 4, 4, ours, release=token))
    assert raised.value.code == "conflict"
    stored = await store.messages("t1", "s", 0, 6)
    assert [m.message["content"] for m in stored] == ["u1", "a1", "u2", "a2", "u3", "a3"]
    assert (await store.load("t1", "s")).version == 4  # type: ignore[union-attr]
    await store.close()
