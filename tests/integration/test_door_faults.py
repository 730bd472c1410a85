"""The faults tests' promises on the Messages and Responses doors: the provider's status
and Retry-After in the door's own error shape, one deadline, a cut stream ended with the
door's error event, a client that leaves cancelling the upstream call, a store that goes
away refused before the upstream is paid, and nothing stored that the provider did not
finish (the chat door's own are in test_upstream_faults, test_client_faults and
test_store_faults)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from proxy.cli.local import held_port
from tests.integration.test_client_faults import leave_once_received
from tests.proxies import MODEL, proxy_config
from tests.redis_servers import redis_on
from tests.upstream import FakeUpstream, Reply
from tests.waiting import eventually

KEY = "door-fault-key-0123456789"
HEADERS = {"authorization": f"Bearer {KEY}", "x-session-id": "door-faults"}


FINISHED = {"messages": "message_stop", "responses": "response.completed"}


def request(door: str, stream: bool = False) -> tuple[str, dict[str, Any]]:
    """(path, body) of a one-message turn through the door."""
    if door == "messages":
        body = {"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
        return "/v1/messages", body | {"stream": stream}
    return "/v1/responses", {"model": MODEL, "input": "hi", "stream": stream}


def send(url: str, door: str, stream: bool = False) -> httpx.Response:
    path, body = request(door, stream)
    return httpx.post(url + path, json=body, headers=HEADERS, timeout=60)


def error_message(door: str, response: httpx.Response) -> str:
    body = response.json()
    if door == "messages":
        assert body["type"] == "error"
    return str(body["error"]["message"])


def stored(url: str) -> int:
    response = httpx.get(f"{url}/v1/sessions/door-faults", headers=HEADERS)
    return len(response.json()["messages"]) if response.status_code == 200 else 0


@pytest.fixture
def url_config(upstream: FakeUpstream) -> dict[str, Any]:
    auth = {"keys": [{"key": KEY}]}
    return proxy_config(upstream, auth=auth, server={"request_timeout_seconds": 2})


@pytest.mark.parametrize("door", ["messages", "responses"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_provider_errors_keep_status_and_retry_after(
    url: str, upstream: FakeUpstream, door: str, stream: bool
) -> None:
    upstream.queue(Reply(status=429, error_message="slow down", headers={"Retry-After": "7"}))
    answer = send(url, door, stream)
    assert answer.status_code == 429
    assert answer.headers["retry-after"] == "7"
    assert "slow down" in error_message(door, answer)
    assert stored(url) == 0


@pytest.mark.parametrize("door", ["messages", "responses"])
def test_a_stalled_provider_is_a_504_within_the_deadline(
    url: str, upstream: FakeUpstream, door: str
) -> None:
    upstream.queue(Reply(stall_seconds=10))
    started = time.monotonic()
    answer = send(url, door)
    assert answer.status_code == 504
    assert time.monotonic() - started < 6
    assert stored(url) == 0


@pytest.mark.parametrize("door", ["messages", "responses"])
def test_a_retry_after_a_cut_stream_is_stored_once(
    url: str, upstream: FakeUpstream, door: str
) -> None:
    upstream.queue(Reply(content="a b c d e f g", fail_after_chunks=4))
    cut = send(url, door, stream=True)
    assert cut.status_code == 200  # the stream had begun
    assert "event: error" in cut.text and f"event: {FINISHED[door]}" not in cut.text
    assert stored(url) == 0
    assert send(url, door).status_code == 200
    assert stored(url) == 2  # the retried turn, once


# -- the client leaves ------------------------------------------------------------------


def left_requests(url: str, door: str) -> float:
    """The door's requests counted with nginx's status for a client that went away."""
    for line in httpx.get(url + "/metrics").text.splitlines():
        if (
            line.startswith("context_proxy_requests_total{")
            and 'status="499"' in line
            and f'api="{door}"' in line
        ):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("door", ["messages", "responses"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_leaving_before_the_first_byte_cancels_the_upstream_call(
    url: str, upstream: FakeUpstream, door: str, stream: bool
) -> None:
    upstream.hung_up = 0
    before = left_requests(url, door)
    upstream.queue(Reply(stall_seconds=30))
    path, body = request(door, stream)
    leave_once_received(url, path, body, HEADERS, upstream)
    eventually(lambda: upstream.hung_up == 1, "the upstream to see its caller leave", 2)
    eventually(lambda: left_requests(url, door) == before + 1, "the request counted as 499", 2)
    assert stored(url) == 0


@pytest.mark.parametrize("door", ["messages", "responses"])
def test_leaving_mid_stream_cancels_the_upstream_call(
    url: str, upstream: FakeUpstream, door: str
) -> None:
    upstream.hung_up = 0
    before = left_requests(url, door)
    upstream.queue(Reply(content="one two three four", stall_seconds=30, stall_after_chunks=2))
    path, body = request(door, stream=True)
    with httpx.stream("POST", url + path, json=body, headers=HEADERS, timeout=10) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("event: ")  # the stream has begun; now leave
    eventually(lambda: upstream.hung_up == 1, "the upstream to see its caller leave", 2)
    eventually(lambda: left_requests(url, door) == before + 1, "the request counted as 499", 2)
    assert stored(url) == 0


# -- the store goes away ----------------------------------------------------------------


def redis_config(upstream: FakeUpstream, port: int) -> dict[str, Any]:
    return proxy_config(
        upstream,
        session={"store": "redis", "redis_url": f"redis://127.0.0.1:{port}/0"},
        auth={"keys": [{"key": KEY}]},
    )


@pytest.mark.parametrize("door", ["messages", "responses"])
def test_redis_down_is_a_503_in_the_doors_shape_before_the_upstream_is_paid(
    upstream: FakeUpstream, start_proxy: Any, door: str
) -> None:
    with held_port() as port:
        with redis_on(port):
            url = start_proxy(redis_config(upstream, port))
            assert send(url, door).status_code == 200
        upstream.requests.clear()
        for stream in (False, True):
            began = time.monotonic()
            answer = send(url, door, stream)
            assert time.monotonic() - began < 15  # bounded, never a hang
            assert answer.status_code == 503, answer.text
            assert answer.headers["retry-after"] == "1"
            assert "session store (Redis) is unreachable" in error_message(door, answer)
        assert upstream.requests == [], "nothing was paid for"
        with redis_on(port):  # back (empty): served again, by itself
            eventually(lambda: httpx.get(url + "/health/ready").status_code == 200, "ready")
            assert send(url, door).status_code == 200
            assert stored(url) == 2


@pytest.mark.parametrize("door", ["messages", "responses"])
def test_a_store_lost_mid_stream_ends_it_with_the_doors_error_event(
    upstream: FakeUpstream, start_proxy: Any, door: str
) -> None:
    """The reply streamed to its end but cannot be stored: the door's error event, and
    not its end of stream, so the client does not believe the turn was kept."""
    upstream.queue(Reply(content="a b c d", stall_seconds=1.0, stall_after_chunks=2))
    path, body = request(door, stream=True)
    with held_port() as port, redis_on(port) as stop:
        url = start_proxy(redis_config(upstream, port))
        with httpx.stream("POST", url + path, json=body, headers=HEADERS, timeout=30) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("event: ")  # the stream has begun
            stop()  # the store goes away while the reply is still streaming
            rest = list(lines)
    events = [line.removeprefix("event: ") for line in rest if line.startswith("event: ")]
    assert "error" in events, rest
    assert "session store (Redis) is unreachable" in "".join(rest)
    assert FINISHED[door] not in events
