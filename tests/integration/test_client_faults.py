"""A client that leaves: before the first byte or in the middle of a stream, the upstream
call is cancelled within 2 s (the test upstream sees its caller hang up), nothing partial
is stored, and the request is counted as 499. One that leaves, or stalls, while it is
still sending its body is no server error: 499, or a 408 after the read timeout."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from tests.proxies import MODEL, proxy_config
from tests.upstream import FakeUpstream, Reply
from tests.waiting import eventually

KEY = "client-fault-key-0123456789"
HEADERS = {"authorization": f"Bearer {KEY}", "x-session-id": "left"}
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def url_config(upstream: FakeUpstream, lean: bool) -> dict[str, Any]:
    return proxy_config(upstream, server={"lean_upstream": lean}, auth={"keys": [{"key": KEY}]})


def left_requests(url: str) -> float:
    """Requests counted with nginx's status for a client that went away (every model
    and door: one that left before its body named a model is counted as `other`)."""
    return requests_with(url, "499")


def requests_with(url: str, status: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in httpx.get(url + "/metrics").text.splitlines()
        if line.startswith("context_proxy_requests_total{") and f'status="{status}"' in line
    )


def leave_once_received(
    url: str, path: str, body: dict[str, Any], headers: dict[str, str], upstream: FakeUpstream
) -> None:
    """Send the request and hang up as soon as the upstream holds it, before the proxy
    has answered a byte: on a machine however slow, the client leaves mid-call."""
    received = len(upstream.requests)
    where = urlsplit(url)
    payload = orjson.dumps(body)
    head = [f"POST {path} HTTP/1.1", f"Host: {where.netloc}", "Content-Type: application/json"]
    head += [f"Content-Length: {len(payload)}", *(f"{k}: {v}" for k, v in headers.items())]
    with socket.create_connection((where.hostname, where.port)) as client:
        client.sendall("\r\n".join([*head, "", ""]).encode() + payload)
        eventually(lambda: len(upstream.requests) > received, "the upstream to get the call", 30)
        client.settimeout(0.2)
        with pytest.raises(TimeoutError):
            client.recv(1)  # not a byte of the answer yet


def stored(url: str) -> int:
    response = httpx.get(url + "/v1/sessions/left", headers=HEADERS)
    return len(response.json()["messages"]) if response.status_code == 200 else 0


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_leaving_before_the_first_byte_cancels_the_upstream_call(
    url: str, upstream: FakeUpstream, stream: bool
) -> None:
    before = left_requests(url)
    upstream.queue(Reply(stall_seconds=30))
    body = {"model": MODEL, "messages": USER, "stream": stream}
    leave_once_received(url, "/v1/chat/completions", body, HEADERS, upstream)
    eventually(lambda: upstream.hung_up == 1, "the upstream to see its caller leave", 2)
    eventually(lambda: left_requests(url) == before + 1, "the request counted as 499", 2)
    assert stored(url) == 0


def test_leaving_mid_stream_cancels_the_upstream_call(url: str, upstream: FakeUpstream) -> None:
    before = left_requests(url)
    upstream.queue(Reply(content="one two three four", stall_seconds=30, stall_after_chunks=2))
    body = {"model": MODEL, "messages": USER, "stream": True}
    with httpx.stream(
        "POST", url + "/v1/chat/completions", json=body, headers=HEADERS, timeout=10
    ) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")  # the stream has begun; now leave
    eventually(lambda: upstream.hung_up == 1, "the upstream to see its caller leave", 2)
    eventually(lambda: left_requests(url) == before + 1, "the request counted as 499", 2)
    assert stored(url) == 0


def half_sent(url: str, path: str = "/v1/chat/completions") -> socket.socket:
    """A connection that has sent the headers of a JSON body and half of the body."""
    where = urlsplit(url)
    payload = orjson.dumps({"model": MODEL, "messages": USER})
    head = [f"POST {path} HTTP/1.1", f"Host: {where.netloc}", "Content-Type: application/json"]
    head += [f"Content-Length: {len(payload)}", *(f"{k}: {v}" for k, v in HEADERS.items())]
    client = socket.create_connection((where.hostname, where.port))
    client.sendall("\r\n".join([*head, "", ""]).encode() + payload[: len(payload) // 2])
    return client


def test_leaving_mid_upload_is_no_server_error(
    url: str, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """A client gone before its body arrived is counted as 499, apart from the server's
    own errors, and logs no traceback."""
    before_left, before_failed = left_requests(url), requests_with(url, "500")
    half_sent(url).close()
    eventually(lambda: left_requests(url) == before_left + 1, "the request counted as 499", 5)
    assert requests_with(url, "500") == before_failed
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert upstream.requests == [] and stored(url) == 0


def test_a_body_not_sent_within_the_read_timeout_is_408(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str]
) -> None:
    """Half a body then silence: a 408 in the OpenAI shape once `server.body_timeout_seconds`
    have passed, not a connection held for as long as the client likes."""
    auth = {"keys": [{"key": KEY}]}
    url = start_proxy(proxy_config(upstream, server={"body_timeout_seconds": 1}, auth=auth))
    started = time.monotonic()
    with half_sent(url) as client:
        client.settimeout(10)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
            chunk = client.recv(65536)
            if not chunk:
                break
            answer += chunk
    waited = time.monotonic() - started
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer
    error = orjson.loads(body)["error"]
    assert error["code"] == "request_timeout" and "1 s" in error["message"]
    assert 1 <= waited < 10  # bounded by the setting, not by the client
    assert upstream.requests == [] and stored(url) == 0
