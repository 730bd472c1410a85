"""What failing providers do to a request, on both upstream paths, with keys on: the
right status within one deadline, the provider's Retry-After, no deployment benched for
a rejected key, no turn stored that the provider did not finish, and a retry of the
failed turn stored once."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.proxies import MODEL, proxy_config
from tests.upstream import FakeUpstream, Reply

KEY = "fault-test-key-0123456789"
SESSION = "faulty"
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def start(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str], lean: bool
) -> Callable[..., str]:
    def started(**sections: Any) -> str:
        server = {"lean_upstream": lean, **sections.pop("server", {})}
        auth = {"keys": [{"key": KEY, "tenant": "faults"}]}
        config = proxy_config(upstream, server=server, auth=auth)
        config |= sections  # whole sections: `router_settings={}` means none at all
        return start_proxy(config)

    return started


def chat(url: str, messages: list[dict[str, Any]], **body: Any) -> httpx.Response:
    return httpx.post(
        url + "/v1/chat/completions",
        json={"model": MODEL, "messages": messages, **body},
        headers={"authorization": f"Bearer {KEY}", "x-session-id": SESSION},
        timeout=60,
    )


def stream(url: str, messages: list[dict[str, Any]]) -> tuple[int, list[str]]:
    body = {"model": MODEL, "messages": messages, "stream": True}
    headers = {"authorization": f"Bearer {KEY}", "x-session-id": SESSION}
    with httpx.stream(
        "POST", url + "/v1/chat/completions", json=body, headers=headers, timeout=60
    ) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        return response.status_code, lines


def stored(url: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{url}/v1/sessions/{SESSION}", headers={"authorization": f"Bearer {KEY}"})
    return response.json()["messages"] if response.status_code == 200 else []


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return response.json()["error"]


def test_no_retry_unless_configured(start: Callable[..., str], upstream: FakeUpstream) -> None:
    url = start(router_settings={})  # LiteLLM's Router would retry twice by default
    upstream.queue(Reply(status=500, error_message="down"))
    error_of(chat(url, USER), 500)
    assert len(upstream.chat_requests()) == 1


def test_429_keeps_the_providers_retry_after(
    start: Callable[..., str], upstream: FakeUpstream
) -> None:
    url = start()
    upstream.queue(Reply(status=429, error_message="slow down", headers={"retry-after": "17"}))
    response = chat(url, USER)
    assert "slow down" in error_of(response, 429)["message"]
    assert response.headers["retry-after"] == "17"
    assert stored(url) == []


def test_a_reply_that_is_not_json_is_502(
    start: Callable[..., str], upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    url = start()
    upstream.queue(Reply(raw=b"<html>bad gateway</html>"))
    error = error_of(chat(url, USER), 502)
    assert stored(url) == []
    # The operator learns why from the log (scrubbed as the error body is), not only
    # from a 502 counted in the metrics.
    said = [r.getMessage() for r in caplog.records if r.name == "context_proxy.doors"]
    assert said == [f"/v1/chat/completions answered 502: {error['message']}"], said
    assert KEY not in caplog.text


@pytest.mark.parametrize(
    "shape",
    [
        b'{"choices": 5}',
        b'{"choices": [5]}',
        b'{"choices": []}',
        b'{"choices": [{"message": 5}]}',
        b'{"choices": [{"message": {"content": 5}}]}',
        b"{}",
    ],
)
def test_a_reply_that_is_no_chat_completion_is_the_providers_failure(
    start: Callable[..., str], upstream: FakeUpstream, shape: bytes
) -> None:
    """A 200 of JSON that is no chat completion: the provider failed (a 5xx of its own,
    never the proxy's "internal error" nor a 200), and nothing is stored."""
    url = start()
    upstream.queue(Reply(raw=shape))
    response = chat(url, USER)
    assert response.status_code in (500, 502), response.text
    assert response.json()["error"]["type"] == "upstream_error", response.text
    assert stored(url) == []


def test_a_stalled_upstream_is_504_within_one_deadline(
    start: Callable[..., str], upstream: FakeUpstream
) -> None:
    """`request_timeout_seconds` bounds the whole call, its retries included."""
    url = start(
        server={"request_timeout_seconds": 1.0},
        router_settings={"num_retries": 2, "retry_after": 0},
    )
    upstream.queue(*[Reply(stall_seconds=5)] * 3)
    began = time.monotonic()
    error_of(chat(url, USER), 504)
    assert time.monotonic() - began < 2.5  # three attempts of 1 s each would take 3
    assert stored(url) == []


def test_a_missing_provider_key_is_401_and_benches_nothing(
    start: Callable[..., str], upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    upstream.require_key = True
    config_key = {"model_list": [], "router_settings": {"num_retries": 0}}
    config_key["model_list"] = [
        {
            "model_name": MODEL,
            "litellm_params": {"model": f"openai/{MODEL}", "api_base": upstream.base_url},
        }
    ]
    url = start(**config_key)
    for _ in range(3):  # each time the key's fault, never "no deployments available"
        error_of(chat(url, USER), 401)
    assert stored(url) == []


def test_a_rejected_key_benches_no_deployment(
    start: Callable[..., str], upstream: FakeUpstream
) -> None:
    url = start()
    upstream.queue(Reply(status=401, error_message="Incorrect API key provided"))
    error_of(chat(url, USER), 401)
    assert chat(url, USER).status_code == 200  # the only deployment still serves


@pytest.mark.parametrize("end", ["clean", "garbage", "cut"])
def test_a_stream_the_provider_did_not_finish_is_an_error_and_not_stored(
    start: Callable[..., str], upstream: FakeUpstream, end: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = start()
    first = [*USER]
    assert chat(url, first).status_code == 200
    before = stored(url)
    turn = [
        *first,
        {"role": "assistant", "content": "echo: hi"},
        {"role": "user", "content": "more"},
    ]
    fault = (
        Reply(content="one two three four", fail_after_chunks=3)
        if end == "cut"
        else Reply(content="one two three four", stream_end=end)
    )
    upstream.queue(fault)
    status, lines = stream(url, turn)
    if status == 200:  # the failure came after the first bytes: an error event ends it
        assert lines and '"error"' in lines[-1], lines
        assert "data: [DONE]" not in lines
    else:  # it came with them: an error status
        assert status == 502
    [said] = [r.getMessage() for r in caplog.records if r.name == "context_proxy.doors"]
    logged = (f"a {MODEL} stream failed (502): ", "/v1/chat/completions answered 502: ")
    assert said.startswith(logged), said  # why, for the operator
    assert stored(url) == before  # exactly as before the failed turn
    # The client retries the same turn: stored once.
    status, lines = stream(url, turn)
    assert lines[-1] == "data: [DONE]"
    after = stored(url)
    assert after[: len(before)] == before
    assert [m["content"] for m in after[len(before) :]] == ["more", "echo: more"]


def test_an_error_as_the_first_event_is_an_error_status(
    start: Callable[..., str], upstream: FakeUpstream
) -> None:
    url = start()
    upstream.queue(Reply(error_event=True, error_message="overloaded"))
    body = {"model": MODEL, "messages": USER, "stream": True}
    response = httpx.post(
        url + "/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {KEY}", "x-session-id": SESSION},
    )
    assert response.status_code >= 500, response.text  # not a 200 that carries an error
    assert "overloaded" in response.json()["error"]["message"]
    assert stored(url) == []
