"""A session store that goes away: a 503 that says so within a bounded time, found before
the upstream is paid; `/health/ready` turns 503; service resumes by itself when the store
is back; a store lost in the middle of a stream ends it with an error event. Redis
stopped and started again; the disk store on a small disk of its own, filled up or
mounted read-only (`tests/small_disk.py`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from proxy.cli.local import held_port
from tests.proxies import MODEL, proxy_config
from tests.redis_servers import redis_on
from tests.servers import wait_ready
from tests.small_disk import proxy_on_small_disk
from tests.upstream import FakeUpstream, Reply
from tests.waiting import eventually

KEY = "store-fault-key-0123456789"
HEADERS = {"authorization": f"Bearer {KEY}", "x-session-id": "kept"}


def chat(url: str, text: str) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}]}
    return httpx.post(url + "/v1/chat/completions", json=body, headers=HEADERS, timeout=30)


def test_redis_down_is_a_503_before_the_upstream_is_paid_and_service_resumes(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str]
) -> None:
    with held_port() as port:
        config = proxy_config(
            upstream,
            session={"store": "redis", "redis_url": f"redis://127.0.0.1:{port}/0"},
            auth={"keys": [{"key": KEY}]},
        )
        with redis_on(port):
            url = start_proxy(config)
            assert chat(url, "before").status_code == 200
        # Redis is gone.
        upstream.requests.clear()
        for stream in (False, True):
            began = time.monotonic()
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": "x"}],
                "stream": stream,
            }
            response = httpx.post(
                url + "/v1/chat/completions", json=body, headers=HEADERS, timeout=30
            )
            assert time.monotonic() - began < 15  # bounded, never a hang
            assert response.status_code == 503, response.text
            error = response.json()["error"]
            assert error["code"] == "store_unavailable"
            assert response.headers["retry-after"] == "1"
        assert upstream.chat_requests() == [], "nothing was paid for"
        assert httpx.get(url + "/health/ready").status_code == 503
        assert httpx.get(url + "/v1/sessions/kept", headers=HEADERS).status_code == 503
        # Redis is back (empty: it kept nothing): the proxy serves again by itself.
        with redis_on(port):
            eventually(lambda: httpx.get(url + "/health/ready").status_code == 200, "ready")
            assert chat(url, "after").status_code == 200
            stored = httpx.get(url + "/v1/sessions/kept", headers=HEADERS).json()
            assert [m["content"] for m in stored["messages"]] == ["after", "echo: after"]


def test_a_store_lost_mid_stream_ends_it_with_an_error_event(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str]
) -> None:
    """The reply streamed to its end, but it cannot be stored: the client is told (an
    error event, no [DONE]) rather than left to believe the turn was kept."""
    with held_port() as port:
        config = proxy_config(
            upstream,
            session={"store": "redis", "redis_url": f"redis://127.0.0.1:{port}/0"},
            auth={"keys": [{"key": KEY}]},
        )
        upstream.queue(Reply(content="a b c d", stall_seconds=1.0, stall_after_chunks=2))
        body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": True}
        with redis_on(port) as stop:
            url = start_proxy(config)
            with httpx.stream(
                "POST", url + "/v1/chat/completions", json=body, headers=HEADERS, timeout=30
            ) as response:
                lines = response.iter_lines()
                assert next(lines).startswith("data: ")  # the stream has begun
                stop()  # the store goes away while the reply is still streaming
                rest = [line for line in lines if line.startswith("data: ")]
    assert rest and '"store_unavailable"' in rest[-1], rest
    assert "data: [DONE]" not in rest


def disk_config(upstream: FakeUpstream, disk: Path, min_free_mb: float = 1) -> dict[str, Any]:
    session = {
        "path": str(disk / "sessions"),
        "tenant_secret": "small-disk-tenant-secret",  # no tenant.key file to write
        "min_free_mb": min_free_mb,
        "max_reply_bytes": 4 * 2**20,  # the 2 MB reply below is stored whole
    }
    return proxy_config(upstream, session=session, auth={"keys": [{"key": KEY}]})


def small_disk_proxy(
    upstream: FakeUpstream, tmp_path: Path, port: int, writable: bool = True, min_free_mb: float = 1
) -> Any:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(disk_config(upstream, tmp_path / "disk", min_free_mb)))
    args = ["--config", str(path), "--port", str(port)]
    return proxy_on_small_disk(args, tmp_path, 16 * 2**20, writable)


def refused_before_the_upstream(
    url: str, upstream: FakeUpstream, words: str, ready: bool = False
) -> None:
    """Each kind of turn is a 503 `store_unavailable` naming the fault in bounded time,
    the upstream saw none of them, and readiness says so (unless the fault is one
    session's: `ready`)."""
    upstream.requests.clear()
    for stream in (False, True):
        body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": stream}
        began = time.monotonic()
        response = httpx.post(url + "/v1/chat/completions", json=body, headers=HEADERS, timeout=30)
        assert time.monotonic() - began < 15
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "store_unavailable"
        assert words in response.json()["error"]["message"]
    assert upstream.chat_requests() == [], "nothing was paid for"
    health = httpx.get(url + "/health/ready")
    if ready:
        assert health.status_code == 200, health.text
    else:
        assert health.status_code == 503 and words in health.json()["store"], health.text


def stored(url: str) -> list[str]:
    response = httpx.get(url + "/v1/sessions/kept", headers=HEADERS)
    assert response.status_code == 200, response.text
    return [m["content"] for m in response.json()["messages"]]


@pytest.mark.parametrize("min_free_mb", [1, 0])  # 0: no margin, still never paid for
def test_a_full_disk_is_a_503_before_the_upstream_is_paid_and_service_resumes(
    upstream: FakeUpstream, tmp_path: Path, min_free_mb: float
) -> None:
    with held_port() as port, small_disk_proxy(upstream, tmp_path, port, True, min_free_mb) as disk:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, disk.process)
        assert chat(url, "before").status_code == 200
        disk.fill()
        refused_before_the_upstream(url, upstream, "disk is full")
        assert stored(url) == ["before", "echo: before"]  # reading needs no space
        disk.free()
        eventually(lambda: httpx.get(url + "/health/ready").status_code == 200, "ready")
        assert chat(url, "after").status_code == 200
        assert stored(url) == ["before", "echo: before", "after", "echo: after"]


def test_a_disk_that_fills_mid_stream_ends_it_with_an_error_event_and_keeps_nothing(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    """The disk fills while a 2 MB reply streams: it cannot be stored, the client is told
    so, the session is as it was, and the client's retry once there is room is stored
    once."""
    long_reply = " ".join(["y" * 50_000] * 40)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "long"}], "stream": True}
    with held_port() as port, small_disk_proxy(upstream, tmp_path, port) as disk:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, disk.process)
        upstream.queue(Reply(content=long_reply, stall_seconds=1.0, stall_after_chunks=2))
        with httpx.stream(
            "POST", url + "/v1/chat/completions", json=body, headers=HEADERS, timeout=30
        ) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")  # the stream has begun
            disk.fill()
            rest = [line for line in lines if line.startswith("data: ")]
        assert rest and '"store_unavailable"' in rest[-1] and "disk is full" in rest[-1]
        assert "data: [DONE]" not in rest
        assert httpx.get(url + "/v1/sessions/kept", headers=HEADERS).status_code == 404
        disk.free()
        upstream.queue(Reply(content=long_reply))
        retried = httpx.post(url + "/v1/chat/completions", json=body, headers=HEADERS, timeout=30)
        assert retried.status_code == 200
        assert stored(url) == ["long", long_reply]


def test_a_read_only_store_is_a_503_until_it_can_be_written(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    """The proxy starts on a volume mounted read-only: it serves (health, a clear 503 per
    turn) rather than crash, and turns to ready by itself once the volume is writable."""
    with held_port() as port, small_disk_proxy(upstream, tmp_path, port, False) as disk:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, disk.process, probe="/health/live")
        refused_before_the_upstream(url, upstream, "read-only")
        disk.make_writable()
        eventually(lambda: httpx.get(url + "/health/ready").status_code == 200, "ready")
        assert chat(url, "after").status_code == 200
        assert stored(url) == ["after", "echo: after"]


def test_the_small_disk_is_the_proxys_own(upstream: FakeUpstream, tmp_path: Path) -> None:
    """The tests above fill a disk: it must be the proxy's small one, never this machine's."""
    with held_port() as port, small_disk_proxy(upstream, tmp_path, port) as disk:
        wait_ready(f"http://127.0.0.1:{port}", disk.process)
        stats = os.statvfs(disk.seen_from_here)
        assert stats.f_blocks * stats.f_frsize == 16 * 2**20
        assert os.statvfs(disk.mount).f_blocks != stats.f_blocks  # not seen from here
