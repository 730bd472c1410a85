"""What every SessionStore promises, checked on each backend (Redis is the real one)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from proxy.sessions import SessionStore
from proxy.stores import DiskSessionStore
from proxy.stores.redis import RedisSessionStore
from tests.unit.sessions_factory import make_session, next_version

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(params=["disk", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    if request.param == "disk":
        disk = DiskSessionStore(str(tmp_path))
        yield disk
        await disk.close()
        return
    prefix = f"cp-test-{uuid.uuid4().hex}"
    redis_store = RedisSessionStore(REDIS_URL, prefix=prefix)
    yield redis_store
    await redis_store.close()
    raw = aioredis.Redis.from_url(REDIS_URL)
    keys = [key async for key in raw.scan_iter(match=f"{prefix}:*")]
    if keys:
        await raw.delete(*keys)
    await raw.aclose()


async def test_compare_and_set(store: SessionStore) -> None:
    first = make_session()
    assert await store.put(first, 0)
    assert not await store.put(make_session(text="other"), 0)  # already exists
    second = next_version(first, "u2")
    assert not await store.put(second, expected_version=5)
    assert await store.put(second, expected_version=1)
    assert not await store.put(next_version(first, "stale"), expected_version=1)
    assert await store.get("t1", "s") == second


async def test_tenants_are_isolated_and_delete_is_per_tenant(store: SessionStore) -> None:
    assert await store.put(make_session("t1", "s", "one"), 0)
    assert await store.put(make_session("t2", "s", "two"), 0)
    one, two = await store.get("t1", "s"), await store.get("t2", "s")
    assert one is not None and one.transcript[0].message["content"] == "one"
    assert two is not None and two.transcript[0].message["content"] == "two"
    assert await store.delete("t1", "s")
    assert await store.get("t1", "s") is None
    assert await store.get("t2", "s") == two
    assert not await store.delete("t1", "s")
