"""The faults tests' promises on the Messages and Responses doors: the provider's status
and Retry-After in the door's own error shape, one deadline, a cut stream ended with the
door's error event, and nothing stored that the provider did not finish."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.conftest import MODEL, proxy_config
from tests.upstream import FakeUpstream, Reply

KEY = "door-fault-key-0123456789"
HEADERS = {"authorization": f"Bearer {KEY}", "x-session-id": "door-faults"}


def send(url: str, door: str, stream: bool = False) -> httpx.Response:
    if door == "messages":
        body = {"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
        path = "/v1/messages"
    else:
        body, path = {"model": MODEL, "input": "hi"}, "/v1/responses"
    return httpx.post(url + path, json=body | {"stream": stream}, headers=HEADERS, timeout=60)


def error_message(door: str, response: httpx.Response) -> str:
    body = response.json()
    if door == "messages":
        assert body["type"] == "error"
    return str(body["error"]["message"])


def stored(url: str) -> int:
    response = httpx.get(f"{url}/v1/sessions/door-faults", headers=HEADERS)
    return len(response.json()["messages"]) if response.status_code == 200 else 0


@pytest.fixture
def url(upstream: FakeUpstream, start_proxy: Any) -> str:
    auth = {"keys": [{"key": KEY}]}
    return start_proxy(proxy_config(upstream, auth=auth, server={"request_timeout_seconds": 2}))


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
    finished = "event: message_stop" if door == "messages" else "event: response.completed"
    assert cut.status_code == 200  # the stream had begun
    assert "event: error" in cut.text and finished not in cut.text
    assert stored(url) == 0
    assert send(url, door).status_code == 200
    assert stored(url) == 2  # the retried turn, once
