"""RedisSessionStore against the real Redis on 127.0.0.1:6379 (each test has its own key prefix)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable

import orjson
import pytest
import redis.asyncio as aioredis

from proxy.sessions import reconcile
from proxy.stores.redis import RedisSessionStore
from tests.unit.sessions_factory import make_session, next_version

URL = "redis://127.0.0.1:6379/0"

StoreFactory = Callable[..., RedisSessionStore]


@pytest.fixture
async def raw() -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(URL)
    yield client
    await client.aclose()


@pytest.fixture
async def prefix(raw: aioredis.Redis) -> AsyncIterator[str]:
    prefix = f"cp-test-{uuid.uuid4().hex}"
    yield prefix
    keys = [key async for key in raw.scan_iter(match=f"{prefix}:*")]
    if keys:
        await raw.delete(*keys)


@pytest.fixture
async def make_store(prefix: str) -> AsyncIterator[StoreFactory]:
    stores: list[RedisSessionStore] = []

    def factory(ttl_seconds: float | None = None) -> RedisSessionStore:
        stores.append(RedisSessionStore(URL, ttl_seconds=ttl_seconds, prefix=prefix))
        return stores[-1]

    yield factory
    for store in stores:
        await store.close()


@pytest.fixture
def store(make_store: StoreFactory) -> RedisSessionStore:
    return make_store()


def msgs_key(prefix: str, tenant: str = "t1", session_id: str = "s") -> str:
    return f"{prefix}:{{{tenant}:{session_id}}}:msgs"


def meta_key(prefix: str, tenant: str = "t1", session_id: str = "s") -> str:
    return f"{prefix}:{{{tenant}:{session_id}}}:meta"


async def test_roundtrip_is_json_not_pickle(
    store: RedisSessionStore, raw: aioredis.Redis, prefix: str
) -> None:
    session = make_session()
    assert await store.get("t1", "s") is None
    assert await store.put(session, expected_version=0)
    assert await store.get("t1", "s") == session
    entries = await raw.lrange(msgs_key(prefix), 0, -1)
    assert [orjson.loads(entry) for entry in entries] == [m.to_dict() for m in session.transcript]
    meta = await raw.hgetall(meta_key(prefix))
    assert meta[b"checkpoints"].startswith(b"[") and meta[b"length"] == b"2"
    assert await raw.pttl(meta_key(prefix)) == -1  # no TTL configured: never expires


async def test_new_store_instance_reads_it(
    store: RedisSessionStore, make_store: StoreFactory
) -> None:
    session = make_session(text="x" * 200_000)
    assert await store.put(session, 0)
    other = make_store()
    assert await other.get("t1", "s") == session
    longer = next_version(session, *(f"m{i}" for i in range(2500)))  # several RPUSH chunks
    assert await other.put(longer, 1)
    assert await store.get("t1", "s") == longer


async def test_tenants_and_odd_session_ids_are_isolated(store: RedisSessionStore) -> None:
    ids = ["s", "x}:meta", "x", "{s}", "t2:s"]
    for index, session_id in enumerate(ids):
        assert await store.put(make_session("t1", session_id, f"one {index}"), 0)
    assert await store.put(make_session("t2", "s", "two"), 0)
    for index, session_id in enumerate(ids):
        loaded = await store.get("t1", session_id)
        assert loaded is not None and loaded.transcript[0].message["content"] == f"one {index}"
    two = await store.get("t2", "s")
    assert two is not None and two.transcript[0].message["content"] == "two"
    assert await store.delete("t1", "s")
    assert await store.get("t1", "s") is None
    assert await store.get("t2", "s") is not None
    with pytest.raises(ValueError):
        await store.get("t1:x", "s")  # would alias tenant "t1", session "x:s"


async def test_delete(store: RedisSessionStore, raw: aioredis.Redis, prefix: str) -> None:
    assert not await store.delete("t1", "s")
    assert await store.put(make_session(), 0)
    assert await store.delete("t1", "s")
    assert await store.get("t1", "s") is None
    assert not await raw.exists(meta_key(prefix), msgs_key(prefix))
    assert await store.put(make_session(), 0)  # can start over at version 0


async def test_recreated_elsewhere_is_rewritten(
    store: RedisSessionStore, make_store: StoreFactory
) -> None:
    # Same version, different content: the remembered etag no longer matches.
    assert await store.put(make_session(text="old"), 0)
    other = make_store()
    assert await other.delete("t1", "s")
    assert await other.put(make_session(text="new"), 0)
    replacement = next_version(make_session(text="mine"), "u2")
    assert await store.put(replacement, 1)
    assert await other.get("t1", "s") == replacement


async def test_ttl_expiry(make_store: StoreFactory, raw: aioredis.Redis, prefix: str) -> None:
    store = make_store(ttl_seconds=0.3)
    assert await store.put(make_session(), 0)
    assert await store.get("t1", "s") is not None
    assert 0 < await raw.pttl(meta_key(prefix)) <= 300
    assert 0 < await raw.pttl(msgs_key(prefix)) <= 300
    await asyncio.sleep(0.5)
    assert await store.get("t1", "s") is None
    assert await store.put(make_session(), 0)  # expired counts as absent


async def test_append_writes_only_new_entries(
    store: RedisSessionStore, raw: aioredis.Redis, prefix: str
) -> None:
    first = make_session()
    assert await store.put(first, 0)
    # Tamper with a stored entry behind the store's back: a rewrite would restore it.
    marker = b'{"marker":true}'
    await raw.lset(msgs_key(prefix), 0, marker)
    before = await raw.lrange(msgs_key(prefix), 0, -1)
    second = next_version(first, "u2", "u3")
    assert await store.put(second, 1)
    after = await raw.lrange(msgs_key(prefix), 0, -1)
    assert after[:2] == before and after[0] == marker
    assert [orjson.loads(entry) for entry in after[2:]] == [
        m.to_dict() for m in second.transcript[2:]
    ]
    assert await raw.hget(meta_key(prefix), "length") == b"4"


async def test_changed_token_counts_are_persisted(store: RedisSessionStore) -> None:
    first = make_session()
    assert await store.put(first, 0)
    loaded = await store.get("t1", "s")
    assert loaded is not None
    second = next_version(loaded, "u2")
    second.transcript[1].tokens["hf:llama"] = 7  # a new tokenizer's count on an old message
    assert await store.put(second, 1)
    assert await store.get("t1", "s") == second


async def test_fork_rewrites_tail(
    store: RedisSessionStore, raw: aioredis.Redis, prefix: str
) -> None:
    first = next_version(make_session(), "u2", "u3")
    assert await store.put(first, 0)
    edited = [first.transcript[0].message, {"role": "assistant", "content": "regenerated"}]
    fork = reconcile(first, edited, tenant="t1", session_id="s", now=3.0)
    assert fork.kind == "fork" and fork.fork_at == 1
    assert await store.put(fork.session, first.version)
    assert await raw.llen(msgs_key(prefix)) == 2
    assert await store.get("t1", "s") == fork.session
    restart = reconcile(
        fork.session,
        [{"role": "user", "content": "fresh"}],
        "full",
        tenant="t1",
        session_id="s",
        now=4.0,
    )
    assert await store.put(restart.session, fork.session.version)  # fork at 0: list replaced
    assert await store.get("t1", "s") == restart.session


async def test_concurrent_puts_one_winner_per_version(make_store: StoreFactory) -> None:
    stores = [make_store() for _ in range(4)]
    base = make_session()
    assert await stores[0].put(base, 0)
    for store in stores:
        await store.get("t1", "s")  # warm each store's memory: exercise the append path
    for version in range(1, 6):
        candidates = [next_version(base, f"writer {i}") for i in range(8)]
        results = await asyncio.gather(
            *(stores[i % 4].put(c, version) for i, c in enumerate(candidates))
        )
        assert sum(results) == 1
        stored = await stores[version % 4].get("t1", "s")
        assert stored == candidates[results.index(True)]
        base = stored


async def test_lock(make_store: StoreFactory) -> None:
    first, second = make_store(), make_store()
    token = await first.try_lock("t1", "s", ttl_seconds=10)
    assert token is not None
    assert await second.try_lock("t1", "s", ttl_seconds=10) is None
    assert await second.try_lock("t2", "s", ttl_seconds=10) is not None  # per session
    await second.unlock("t1", "s", "not-the-token")  # does nothing
    assert await second.try_lock("t1", "s", ttl_seconds=10) is None
    await first.unlock("t1", "s", token)
    again = await second.try_lock("t1", "s", ttl_seconds=0.2)
    assert again is not None
    await asyncio.sleep(0.3)  # expired: a crashed holder does not block forever
    late = await first.try_lock("t1", "s", ttl_seconds=10)
    assert late is not None
    await second.unlock("t1", "s", again)  # stale holder cannot release the new lock
    assert await second.try_lock("t1", "s", ttl_seconds=10) is None


async def test_ping_and_close(make_store: StoreFactory) -> None:
    assert await make_store().ping()
    down = RedisSessionStore("redis://127.0.0.1:1/0")
    assert not await down.ping()
    await down.close()
    with pytest.raises(ValueError):
        RedisSessionStore(URL, prefix="a{b}")
