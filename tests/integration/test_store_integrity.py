"""A store that would not keep a turn refuses it before the upstream is paid, and says so
on `/health/ready`: the disk store's database file removed or replaced while serving, a
damaged record, Redis at its `maxmemory`. Never a 500 from a store."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
import redis

from tests.integration.test_store_faults import (
    HEADERS,
    KEY,
    chat,
    refused_before_the_upstream,
    stored,
)
from tests.proxies import MODEL, proxy_config
from tests.redis_servers import redis_server
from tests.upstream import FakeUpstream, Reply
from tests.waiting import eventually


def disk_proxy(upstream: FakeUpstream, start: Callable[[dict[str, Any]], str], path: Path) -> str:
    config = proxy_config(upstream, session={"path": str(path)}, auth={"keys": [{"key": KEY}]})
    return start(config)


def test_a_database_file_removed_while_serving_refuses_turns_rather_than_lose_them(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str], tmp_path: Path
) -> None:
    url = disk_proxy(upstream, start_proxy, tmp_path / "store")
    assert chat(url, "before").status_code == 200
    for name in ("sessions.sqlite3", "sessions.sqlite3-wal", "sessions.sqlite3-shm"):
        (tmp_path / "store" / name).unlink(missing_ok=True)
    refused_before_the_upstream(url, upstream, "removed or replaced")


def test_a_database_file_replaced_while_serving_refuses_turns(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str], tmp_path: Path
) -> None:
    """A backup copied over the live file: writing on to the old one would be lost."""
    url = disk_proxy(upstream, start_proxy, tmp_path / "store")
    assert chat(url, "before").status_code == 200
    live = tmp_path / "store" / "sessions.sqlite3"
    shutil.copy(live, tmp_path / "copy")
    (tmp_path / "copy").replace(live)
    refused_before_the_upstream(url, upstream, "removed or replaced")


def test_a_database_file_damaged_while_serving_refuses_turns_and_is_not_ready(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str], tmp_path: Path
) -> None:
    url = disk_proxy(upstream, start_proxy, tmp_path / "store")
    assert chat(url, "before").status_code == 200
    with sqlite3.connect(tmp_path / "store" / "sessions.sqlite3") as database:
        database.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all of it in the main file
    with open(tmp_path / "store" / "sessions.sqlite3", "r+b") as file:
        file.write(b"\xde\xad" * 2048)  # its header and first pages
    refused_before_the_upstream(url, upstream, "damaged")


def damage(store: dict[str, Any], directory: Path) -> Callable[[], bytes]:
    """Overwrite the session's meta record with bytes that are not JSON; returns a reader
    of the record as stored."""
    garbage = b'{"\xff'
    if store.get("store") == "redis":
        client = redis.Redis.from_url(store["redis_url"])
        (key,) = client.keys("context-proxy:{*:kept}:meta")
        client.hset(key, "data", garbage)
        return lambda: client.hget(key, "data")
    path = directory / "sessions.sqlite3"
    with sqlite3.connect(path) as database:
        database.execute("UPDATE sessions SET meta = ? WHERE session = 'kept'", (garbage,))

    def read() -> bytes:
        with sqlite3.connect(path) as database:
            return database.execute("SELECT meta FROM sessions WHERE session = 'kept'").fetchone()[
                0
            ]

    return read


def test_a_damaged_record_is_a_503_and_stays_as_it_was(
    upstream: FakeUpstream,
    start_proxy: Callable[[dict[str, Any]], str],
    tmp_path: Path,
    store: dict[str, Any],
) -> None:
    session = {**store, "path": str(tmp_path / "store")}
    url = start_proxy(proxy_config(upstream, session=session, auth={"keys": [{"key": KEY}]}))
    assert chat(url, "before").status_code == 200
    assert chat(url, "second").status_code == 200
    record = damage(store, tmp_path / "store")
    refused_before_the_upstream(
        url, upstream, "damaged record", ready=True
    )  # other sessions are served
    shown = httpx.get(url + "/v1/sessions/kept", headers=HEADERS)
    assert shown.status_code == 503 and "damaged record" in shown.json()["error"]["message"]
    assert record() == b'{"\xff'  # left as it is, for whoever repairs it
    other = {**HEADERS, "x-session-id": "other"}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    response = httpx.post(url + "/v1/chat/completions", json=body, headers=other, timeout=30)
    assert response.status_code == 200
    # The list leaves the damaged record out (logged) and shows every other session.
    listed = httpx.get(url + "/v1/sessions", headers=HEADERS)
    assert listed.status_code == 200, listed.text
    assert [s["id"] for s in listed.json()["data"]] == ["other"]


def test_redis_at_its_maxmemory_refuses_turns_before_the_upstream_is_paid(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str]
) -> None:
    with redis_server() as redis_url:
        config = proxy_config(
            upstream,
            session={"store": "redis", "redis_url": redis_url},
            auth={"keys": [{"key": KEY}]},
        )
        url = start_proxy(config)
        assert chat(url, "before").status_code == 200
        client = redis.Redis.from_url(redis_url)
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", used // 2)
        eventually(lambda: httpx.get(url + "/health/ready").status_code == 503, "not ready")
        assert "out of memory" in httpx.get(url + "/health/ready").json()["store"]
        refused_before_the_upstream(url, upstream, "out of memory")
        assert stored(url) == ["before", "echo: before"]  # reads go on
        client.config_set("maxmemory", 0)
        eventually(lambda: httpx.get(url + "/health/ready").status_code == 200, "ready")
        assert chat(url, "after").status_code == 200
        assert stored(url) == ["before", "echo: before", "after", "echo: after"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_too_long_to_keep_is_answered_whole_and_stored_as_a_marked_cut(
    upstream: FakeUpstream,
    start_proxy: Callable[[dict[str, Any]], str],
    store: dict[str, Any],
    stream: bool,
) -> None:
    """A 1.2 MB reply: the client gets all of it; the session keeps 64 KiB of it, marked,
    under the whole reply's hash, so the client's resend of its whole copy is the same
    conversation (no fork, nothing stored twice) and a later turn reads no more of it."""
    session = {**store, "max_reply_bytes": 64 * 1024}
    url = start_proxy(proxy_config(upstream, session=session))
    client = openai.OpenAI(
        base_url=url + "/v1", api_key="k", max_retries=0, default_headers={"x-session-id": "big"}
    )
    long_reply = " ".join(f"{i:06d}" + "x" * 994 for i in range(1200))  # 1.2 MB, 1,200 chunks
    upstream.queue(Reply(content=long_reply))
    first = [{"role": "user", "content": "write it all"}]
    if stream:
        chunks = client.chat.completions.create(model=MODEL, messages=first, stream=True)
        answered = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        answered = (
            client.chat.completions.create(model=MODEL, messages=first).choices[0].message.content
        )
    assert answered == long_reply  # the client was answered whole
    assert f'context_proxy_replies_cut_total{{model="{MODEL}"}}' in httpx.get(url + "/metrics").text

    def kept() -> list[str]:
        shown = httpx.get(url + "/v1/sessions/big", headers={"authorization": "Bearer k"}).json()
        return [m["content"] for m in shown["messages"]]

    stored_reply = kept()[1]
    assert len(stored_reply.encode()) < 64 * 1024
    assert stored_reply.startswith(long_reply[:10_000])
    assert stored_reply.endswith("-byte reply]") and "kept only the start" in stored_reply
    # The client resends its whole copy: the same conversation, one new turn.
    again = [
        *first,
        {"role": "assistant", "content": long_reply},
        {"role": "user", "content": "ok"},
    ]
    assert (
        client.chat.completions.create(model=MODEL, messages=again).choices[0].message.content
        == "echo: ok"
    )
    assert kept() == ["write it all", stored_reply, "ok", "echo: ok"]
    # A client that sends only its new turn: no more than the session's cut goes upstream.
    upstream.requests.clear()
    appended = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "more"}],
        extra_headers={"x-session-mode": "append"},
    )
    assert appended.choices[0].message.content == "echo: more"
    sent = upstream.chat_requests()[-1].body["messages"]
    assert sent[-1]["content"] == "more"
    assert len(orjson.dumps(sent)) < 64 * 1024
    assert kept() == ["write it all", stored_reply, "ok", "echo: ok", "more", "echo: more"]


def test_a_damaged_memory_record_is_a_503_not_a_500(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str], tmp_path: Path
) -> None:
    config = proxy_config(
        upstream,
        session={"path": str(tmp_path / "store")},
        auth={"keys": [{"key": KEY}]},
        memory={"enabled": True},
    )
    url = start_proxy(config)
    remembering = {**HEADERS, "x-memory-id": "team"}
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "The codename is BLUE HERON."}],
    }
    sent = httpx.post(url + "/v1/chat/completions", json=body, headers=remembering, timeout=30)
    assert sent.status_code == 200
    with sqlite3.connect(tmp_path / "store" / "sessions.sqlite3") as database:
        assert database.execute("UPDATE memories SET data = x'5b7b'").rowcount == 1
    shown = httpx.get(url + "/v1/memories/team", headers=HEADERS)
    assert shown.status_code == 503 and "damaged record" in shown.json()["error"]["message"]
    upstream.requests.clear()
    again = httpx.post(url + "/v1/chat/completions", json=body, headers=remembering, timeout=30)
    assert again.status_code == 503 and again.json()["error"]["code"] == "store_unavailable"
    assert upstream.chat_requests() == []
