"""A session store that goes away: a 503 that says so within a bounded time, found before
the upstream is paid; `/health/ready` turns 503; service resumes by itself when the store
is back; a store lost in the middle of a stream ends it with an error event. (Redis
here; the disk store's faults are not covered yet.)"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from proxy.local import held_port
from tests.conftest import MODEL, proxy_config
from tests.redis_servers import redis_on
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
