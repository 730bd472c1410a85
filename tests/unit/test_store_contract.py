"""What every SessionStore promises, checked on each backend: the disk store, Redis, and a
three-node Redis Cluster the tests start on loopback."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import diskcache
import orjson
import pytest
import redis.asyncio as aioredis

from proxy.conversation.identity import GENESIS, message_hash
from proxy.sessions.records import PLANS_KEPT, Commit, Inserts
from proxy.sessions.store import SessionStore
from proxy.sessions.stores import DiskSessionStore, LeaseLost
from proxy.sessions.stores.redis import RedisSessionStore, connect
from tests.unit.sessions_factory import COUNTER, checkpoint, entries, meta
from tests.waiting import eventually_async

LEGACY = json.loads((Path(__file__).parent / "fixtures" / "session-0.1.json").read_text())


@pytest.fixture(
    params=[
        "disk",
        pytest.param("redis", marks=pytest.mark.integration),
        pytest.param("redis-cluster", marks=pytest.mark.integration),
    ]
)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def make_store(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Any]:
    """Stores of one backend sharing one place (a directory, a key prefix)."""
    stores: list[SessionStore] = []
    prefix = f"cp-test-{uuid.uuid4().hex}"
    url = ""
    if backend != "disk":
        url = request.getfixturevalue(
            "redis_cluster_url" if backend == "redis-cluster" else "redis_url"
        )

    def make(ttl_seconds: float | None = None) -> SessionStore:
        if backend == "disk":
            stores.append(DiskSessionStore(str(tmp_path), ttl_seconds))
        else:
            stores.append(RedisSessionStore(url, ttl_seconds, prefix=prefix))
        return stores[-1]

    make.prefix = prefix  # type: ignore[attr-defined]
    make.url = url  # type: ignore[attr-defined]
    make.directory = tmp_path  # type: ignore[attr-defined]
    yield make
    for store in stores:
        await store.close()
    if backend != "disk":
        raw = connect(url)
        for key in [k async for k in raw.scan_iter(match=f"{prefix}:*")]:
            await raw.delete(key)
        await raw.aclose()


@pytest.fixture
def store(make_store: Any) -> SessionStore:
    return make_store()


async def test_a_new_session_round_trips(store: SessionStore) -> None:
    transcript = entries("u1", "a1", "u2", "a2")
    assert await store.load("t1", "s") is None
    assert await store.commit(Commit(meta(transcript), 0, 0, transcript))
    assert await store.load("t1", "s") == meta(transcript)
    assert await store.messages("t1", "s", 0, 4) == transcript
    assert await store.messages("t1", "s", 1, 3) == transcript[1:3]
    assert await store.messages("t1", "s", 4, 4) == []
    assert await store.checkpoints("t1", "s") == []


async def test_compare_and_set(store: SessionStore) -> None:
    first = entries("u1", "a1")
    assert await store.commit(Commit(meta(first), 0, 0, first))
    assert not await store.commit(Commit(meta(entries("other")), 0, 0, entries("other")))
    more = entries("u2", "a2", start=2, head=first[-1].chain)
    grown = meta([*first, *more], version=2)
    assert not await store.commit(Commit(grown, 5, 2, more))
    assert await store.commit(Commit(grown, 1, 2, more))
    assert not await store.commit(Commit(meta([*first, *more], version=3), 1, 2, more))
    assert await store.load("t1", "s") == grown


async def test_a_turn_appends_and_a_fork_cuts(store: SessionStore) -> None:
    first = entries("u1", "a1", "u2", "a2")
    assert await store.commit(Commit(meta(first), 0, 0, first))
    more = entries("u3", "a3", start=4, head=first[-1].chain)
    assert await store.commit(Commit(meta([*first, *more], version=2), 1, 4, more))
    assert await store.messages("t1", "s", 0, 6) == [*first, *more]
    edited = entries("u2 edited", start=2, head=first[1].chain)
    forked = [*first[:2], *edited]
    assert await store.commit(Commit(meta(forked, version=3), 2, 2, edited))
    assert await store.messages("t1", "s", 0, 3) == forked
    with pytest.raises(LookupError):
        await store.messages("t1", "s", 0, 6)  # what the fork cut away is gone
    restart = entries("fresh")
    assert await store.commit(Commit(meta(restart, version=4), 3, 0, restart))  # fork at 0
    assert await store.messages("t1", "s", 0, 1) == restart


async def test_checkpoints_are_added_and_cut_with_the_history(store: SessionStore) -> None:
    transcript = entries("u1", "a1", "u2", "a2")
    one, two = checkpoint(transcript, 2, "first"), checkpoint(transcript, 4, "second")
    assert await store.commit(Commit(meta(transcript, checkpoints=[one]), 0, 0, transcript, [one]))
    summarized = meta(transcript, version=2, checkpoints=[one, two])
    assert await store.commit(Commit(summarized, 1, 4, [], [two]))
    assert await store.checkpoints("t1", "s") == [one, two]
    assert (await store.load("t1", "s")) == summarized
    edited = entries("u2 edited", start=2, head=transcript[1].chain)
    forked = meta([*transcript[:2], *edited], version=3, checkpoints=[one])
    assert await store.commit(Commit(forked, 2, 2, edited))
    assert await store.checkpoints("t1", "s") == [one]


async def test_tenants_and_odd_session_ids_are_isolated(store: SessionStore) -> None:
    ids = ["s", "x}:meta", "x", "{s}", "t2:s", "a/b", "m:0", "ünï"]
    for index, session_id in enumerate(ids):
        transcript = entries(f"one {index}")
        assert await store.commit(Commit(meta(transcript, session_id=session_id), 0, 0, transcript))
    two = entries("two")
    assert await store.commit(Commit(meta(two, tenant="t2"), 0, 0, two))
    for index, session_id in enumerate(ids):
        loaded = await store.messages("t1", session_id, 0, 1)
        assert loaded[0].message["content"] == f"one {index}"
    assert not await store.delete("t1", "missing")
    assert await store.delete("t1", "s")
    assert await store.load("t1", "s") is None
    assert (await store.messages("t2", "s", 0, 1)) == two
    assert await store.commit(Commit(meta(two), 0, 0, two))  # a deleted session starts over
    with pytest.raises(ValueError):
        await store.load("t1:x", "s")  # would alias tenant "t1", session "x:s"


async def test_sessions_are_listed_per_tenant_in_pages(make_store: Any) -> None:
    store, expiring = make_store(), make_store(ttl_seconds=0.3)
    keys = [("a", "s1"), ("a", "s2"), ("a.b", "s0"), ("b", "s1"), ("b", "s3")]
    for tenant, session_id in keys:
        transcript = entries(f"{tenant}/{session_id}")
        assert await store.commit(
            Commit(meta(transcript, tenant=tenant, session_id=session_id), 0, 0, transcript)
        )

    def listed(found: list[Any]) -> list[tuple[str, str]]:
        return [(m.tenant, m.session_id) for m in found]

    everything = listed(await store.sessions(None, None, 10))
    assert sorted(everything) == sorted(keys)  # each backend has an order of its own
    pages: list[tuple[str, str]] = []
    after = None
    while page := listed(await store.sessions(None, after, 2)):
        assert len(page) <= 2
        pages += page
        after = page[-1]
    assert pages == everything  # the pages, in order, are the whole list
    assert listed(await store.sessions("a", None, 10)) == [("a", "s1"), ("a", "s2")]
    assert listed(await store.sessions("a", ("a", "s1"), 10)) == [("a", "s2")]
    assert listed(await store.sessions("c", None, 10)) == []

    assert await store.delete("b", "s1")
    assert listed(await store.sessions("b", None, 10)) == [("b", "s3")]
    gone = entries("short-lived")
    assert await expiring.commit(Commit(meta(gone, tenant="c", session_id="x"), 0, 0, gone))
    assert listed(await store.sessions("c", None, 10)) == [("c", "x")]

    async def unlisted() -> bool:
        return listed(await store.sessions("c", None, 10)) == []

    await eventually_async(unlisted, "the expired session to leave the list")


async def test_concurrent_commits_one_winner_per_version(make_store: Any) -> None:
    stores = [make_store() for _ in range(4)]
    base = entries("u1", "a1")
    assert await stores[0].commit(Commit(meta(base), 0, 0, base))
    for version in range(1, 4):
        candidates = [
            entries(f"writer {i}", start=len(base), head=base[-1].chain) for i in range(8)
        ]
        results = await asyncio.gather(
            *(
                stores[i % 4].commit(
                    Commit(meta([*base, *c], version=version + 1), version, len(base), c)
                )
                for i, c in enumerate(candidates)
            )
        )
        assert sum(results) == 1
        base = [*base, *candidates[results.index(True)]]
        assert await stores[version % 4].messages("t1", "s", 0, len(base)) == base


async def test_plan_records_keep_the_newest_and_go_with_the_session(store: SessionStore) -> None:
    transcript: list[Any] = []
    for version in range(1, PLANS_KEPT + 4):
        turn = entries(f"m{version}", start=len(transcript), head=_head(transcript))
        record = orjson.dumps({"version": version, "parts": [{"kind": "window"}]})
        grown = meta([*transcript, *turn], version=version)
        assert await store.commit(Commit(grown, version - 1, len(transcript), turn, plan=record))
        transcript += turn
    # A background summary stores no plan record: the records stay as they were.
    assert await store.commit(
        Commit(meta(transcript, version=PLANS_KEPT + 4), PLANS_KEPT + 3, len(transcript), [])
    )

    plans = [orjson.loads(record) for record in await store.plans("t1", "s")]
    assert [p["version"] for p in plans] == list(range(4, PLANS_KEPT + 4))  # the newest, in order
    assert await store.plans("t1", "other") == []
    assert await store.delete("t1", "s")
    assert await store.plans("t1", "s") == []


async def test_a_sessions_inserts_are_kept_until_a_turn_changes_them(
    make_store: Any,
) -> None:
    """The blocks a turn sent beside its window are read by any process that serves the
    session next, as they were; a turn that leaves them as they are writes nothing of
    them; they go with the session (deleted, or expired and written anew)."""
    store, other = make_store(), make_store()
    first = Inserts(
        memory={"role": "system", "content": "Remembered: deploy day is Friday"},
        memory_from="m1",
        recall={"role": "system", "content": "Recalled: [message 3] the key is K-7"},
        recall_before=12,
        recall_tokens=15,
        recall_shown={3: None, 9: ("deploy", "key")},
        recall_archive=(2, "h" * 32),
    )
    transcript = entries("u1", "a1")
    grown = replace(meta(transcript), inserts=first.digest())
    assert await store.commit(Commit(grown, 0, 0, transcript, inserts=first.to_json()))
    assert (await other.load("t1", "s")).inserts == first.digest()
    assert Inserts.from_json(await other.inserts("t1", "s")) == first

    turn = entries("u2", start=2, head=_head(transcript))
    assert await other.commit(Commit(replace(grown, version=2, length=3), 1, 2, turn))  # unchanged
    assert Inserts.from_json(await store.inserts("t1", "s")) == first
    second = replace(first, recall=None, recall_shown={})
    assert await store.commit(
        Commit(
            replace(grown, version=3, inserts=second.digest()), 2, 3, [], inserts=second.to_json()
        )
    )
    assert Inserts.from_json(await other.inserts("t1", "s")) == second
    assert await store.inserts("t1", "elsewhere") is None

    assert await store.delete("t1", "s")
    assert await other.inserts("t1", "s") is None
    assert await store.commit(Commit(meta(transcript), 0, 0, transcript))  # the session anew
    assert await other.inserts("t1", "s") is None


def _head(transcript: list[Any]) -> str:
    return transcript[-1].chain if transcript else GENESIS


async def test_ttl_expiry(make_store: Any) -> None:
    store = make_store(ttl_seconds=0.3)
    transcript = entries("u1", "a1")
    assert await store.commit(Commit(meta(transcript), 0, 0, transcript))
    assert await store.load("t1", "s") is not None

    async def expired() -> bool:
        return await store.load("t1", "s") is None

    await eventually_async(expired, "the session's TTL to pass")
    assert await store.commit(
        Commit(meta(transcript), 0, 0, transcript)
    )  # expired counts as absent


async def test_locks(make_store: Any) -> None:
    first, second = make_store(), make_store()
    token = await first.try_lock("t1", "s", 10, "summary")
    assert token is not None
    assert await second.try_lock("t1", "s", 10, "summary") is None
    assert await second.try_lock("t2", "s", 10, "summary") is not None  # per session
    turn = await second.try_lock("t1", "s", 10, "turn")  # per name
    assert turn is not None
    await second.unlock("t1", "s", "not-the-token", "summary")  # does nothing
    assert await second.try_lock("t1", "s", 10, "summary") is None
    await first.unlock("t1", "s", token, "summary")
    again = await second.try_lock("t1", "s", 0.2, "summary")
    assert again is not None

    tokens: list[str | None] = []

    async def retaken() -> bool:  # expired: a crashed holder does not block forever
        tokens.append(await first.try_lock("t1", "s", 10, "summary"))
        return tokens[-1] is not None

    await eventually_async(retaken, "the lock to expire")
    await second.unlock("t1", "s", again, "summary")  # a stale holder cannot release it
    assert await second.try_lock("t1", "s", 10, "summary") is None
    assert not await second.extend("t1", "s", again, 10, "summary")  # nor keep it
    assert await second.try_lock("t1", "s", 10, "turn") is None  # the turn lock holds


async def test_a_commit_gives_back_the_turn_lock_it_names(make_store: Any) -> None:
    """A turn's lock goes back with its commit (one store call fewer per turn); a failed
    commit keeps it, and a commit naming another token (a turn whose lock lapsed and was
    taken) is refused and leaves the holder's alone."""
    first, second = make_store(), make_store()
    token = await first.try_lock("t1", "s", 30, "turn")
    assert token is not None
    transcript = entries("u1", "a1")
    assert not await first.commit(
        Commit(meta(transcript), 5, 0, transcript, release=token)
    )  # stale
    assert await second.try_lock("t1", "s", 30, "turn") is None
    with pytest.raises(LeaseLost):
        await second.commit(Commit(meta(transcript), 0, 0, transcript, release="someone-else"))
    assert await second.try_lock("t1", "s", 30, "turn") is None
    assert await first.commit(Commit(meta(transcript), 0, 0, transcript))  # naming none: unfenced
    more = entries("u2", "a2", start=2, head=transcript[-1].chain)
    assert await first.commit(
        Commit(meta([*transcript, *more], version=2), 1, 2, more, release=token)
    )
    assert await second.try_lock("t1", "s", 30, "turn") is not None


async def test_an_extended_lock_outlives_its_first_term(make_store: Any) -> None:
    first, second = make_store(), make_store()
    token = await first.try_lock("t1", "s", 1.0, "turn")
    assert token is not None
    for _ in range(8):  # 2 s in all, twice the first term; 0.75 s of slack for a slow loop
        assert await first.extend("t1", "s", token, 1.0, "turn")
        await asyncio.sleep(0.25)  # the holder's renewal cadence (a quarter term), as TurnLocks'
        assert await second.try_lock("t1", "s", 10, "turn") is None
    await first.unlock("t1", "s", token, "turn")
    assert await second.try_lock("t1", "s", 10, "turn") is not None


async def test_sessions_written_by_release_0_1_still_load(
    backend: str, store: SessionStore, make_store: Any
) -> None:
    """The fixture was written by release 0.1's own store code (see its `written_by`)."""
    tenant, session_id = "0123456789abcdef0123456789abcdef", "legacy/1"
    await _write_legacy(backend, make_store)
    loaded = await store.load(tenant, session_id)
    old = LEGACY["disk"]["value"]
    assert loaded is not None
    assert (loaded.length, loaded.head, loaded.version) == (6, old["head"], old["version"])
    assert loaded.totals == {COUNTER: sum(10 + i for i in range(6))}  # "char" counted only one
    assert loaded.checkpoint is not None and loaded.checkpoint.covers_until == 2
    assert loaded.checkpoint.before == {COUNTER: 10 + 11}
    messages = await store.messages(tenant, session_id, 0, 6)
    assert [m.message for m in messages] == [e["message"] for e in old["transcript"]]
    assert [m.hash for m in messages] == [message_hash(m.message) for m in messages]
    assert messages[-1].chain == old["head"] and messages[1].chain == loaded.checkpoint.chain_hash
    assert [c.text for c in await store.checkpoints(tenant, session_id)] == [
        "The user asked about INV-100."
    ]
    more = entries("u4", start=6, head=messages[-1].chain)
    grown = loaded.evolve(version=loaded.version + 1, length=7, head=more[0].chain)
    assert await store.commit(Commit(grown, loaded.version, 6, more))  # and it carries on
    assert await make_store().messages(tenant, session_id, 0, 7) == [*messages, *more]


async def _write_legacy(backend: str, make_store: Any) -> None:
    """Put the fixture where release 0.1 kept it, byte for byte."""
    if backend == "disk":
        with diskcache.Cache(str(make_store.directory)) as cache:
            disk = LEGACY["disk"]
            cache.set(disk["key"], orjson.dumps(disk["value"]), tag=disk["tag"])
        return
    raw = connect(make_store.url)
    tag = f"{make_store.prefix}:{{0123456789abcdef0123456789abcdef:legacy/1}}"
    await raw.hset(f"{tag}:meta", mapping=LEGACY["redis"]["meta"])
    await raw.rpush(f"{tag}:msgs", *LEGACY["redis"]["messages"])
    await raw.aclose()


@pytest.mark.integration
def test_cluster_urls_pick_the_cluster_client(redis_url: str, redis_cluster_url: str) -> None:
    assert isinstance(connect(redis_url), aioredis.Redis)
    assert not isinstance(connect(redis_cluster_url), aioredis.Redis)
    with pytest.raises(ValueError):
        RedisSessionStore(redis_url, prefix="a{b}")
