"""Every failure is an OpenAI-shaped error with the right status, and leaks nothing."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import openai
import pytest

from tests.proxies import MODEL, UPSTREAM_KEY, proxy_config
from tests.upstream import FakeUpstream, Reply

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def url_config(upstream: FakeUpstream, lean: bool) -> dict[str, Any]:
    """The proxy on both upstream paths: every test here runs on each."""
    return proxy_config(upstream, server={"lean_upstream": lean})


def post(url: str, body: object = None, content: bytes | None = None) -> httpx.Response:
    endpoint = url + "/v1/chat/completions"
    if content is not None:
        return httpx.post(endpoint, content=content, headers={"content-type": "application/json"})
    return httpx.post(endpoint, json=body)


def assert_openai_error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code", "param"}
    assert isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in response.text
    if param is not None:
        assert error["param"] == param
    return error


def test_invalid_json(url: str, upstream: FakeUpstream) -> None:
    error = assert_openai_error(post(url, content=b'{"model": "x", '), 400)
    assert error["code"] == "invalid_json"
    assert_openai_error(post(url, content=b"[1, 2]"), 400)
    assert upstream.chat_requests() == []


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": USER}, "model"),
        ({"model": MODEL}, "messages"),
        ({"model": MODEL, "messages": []}, "messages"),
        ({"model": 42, "messages": USER}, "model"),
        ({"model": MODEL, "messages": "hi"}, "messages"),
        ({"model": MODEL, "messages": ["hi"]}, "messages[0]"),
        ({"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"model": MODEL, "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"model": MODEL, "messages": USER, "temperature": "hot"}, "temperature"),
        ({"model": MODEL, "messages": USER, "n": 1.5}, "n"),
        ({"model": MODEL, "messages": USER, "stream": "yes"}, "stream"),
        ({"model": MODEL, "messages": USER, "tools": {"a": 1}}, "tools"),
        # Out of their documented ranges: refused before a provider is paid to refuse them.
        ({"model": MODEL, "messages": USER, "max_tokens": 0}, "max_tokens"),
        ({"model": MODEL, "messages": USER, "max_tokens": -1}, "max_tokens"),
        ({"model": MODEL, "messages": USER, "n": 1000}, "n"),
        ({"model": MODEL, "messages": USER, "temperature": -5}, "temperature"),
        ({"model": MODEL, "messages": USER, "top_p": 1.5}, "top_p"),
        ({"model": MODEL, "messages": USER, "presence_penalty": 3}, "presence_penalty"),
        ({"model": MODEL, "messages": USER, "max_completion_tokens": 0}, "max_completion_tokens"),
    ],
)
def test_bad_fields_are_400(url: str, upstream: FakeUpstream, body: dict, param: str) -> None:
    assert_openai_error(post(url, body), 400, param)
    assert upstream.chat_requests() == []


@pytest.mark.parametrize(
    "internal",
    ["api_base", "base_url", "api_key", "custom_llm_provider", "fallbacks", "mock_response"],
)
def test_litellm_internal_parameters_are_rejected(
    url: str, upstream: FakeUpstream, internal: str
) -> None:
    body = {"model": MODEL, "messages": USER, internal: "http://127.0.0.1:9/"}
    error = assert_openai_error(post(url, body), 400, internal)
    assert error["code"] == "unknown_parameter"
    assert upstream.chat_requests() == []


def test_sdk_sees_internal_parameter_as_bad_request(url: str) -> None:
    sdk = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.BadRequestError):
        sdk.chat.completions.create(
            model=MODEL, messages=USER, extra_body={"api_base": "http://127.0.0.1:9/"}
        )


def test_body_over_limit_is_413(upstream: FakeUpstream, start_proxy: Any, lean: bool) -> None:
    url = start_proxy(
        proxy_config(upstream, server={"lean_upstream": lean, "max_body_bytes": 4096})
    )
    big = {"model": MODEL, "messages": [{"role": "user", "content": "x" * 10_000}]}
    assert_openai_error(post(url, big), 413)
    assert upstream.chat_requests() == []


def test_413_without_reading_the_whole_body(
    upstream: FakeUpstream, start_proxy: Any, lean: bool
) -> None:
    """A chunked upload with no Content-Length is cut off once it passes twice the limit
    (up to that, the rest is read so the client can see the answer): the proxy answers
    413 while the client is still sending."""
    url = start_proxy(
        proxy_config(upstream, server={"lean_upstream": lean, "max_body_bytes": 4096})
    )
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"a" * 2048
        for _ in range(6):  # 12 KiB of an announced-unbounded body
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        sock.settimeout(10)
        answer = b""
        while b'"request_too_large"' not in answer and (data := sock.recv(65536)):
            answer += data
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"request_too_large"' in answer


@pytest.mark.parametrize(
    ("status", "error_class"),
    [
        (401, openai.AuthenticationError),
        (404, openai.NotFoundError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
def test_upstream_status_is_kept(
    url: str, upstream: FakeUpstream, status: int, error_class: type
) -> None:
    upstream.queue(Reply(status=status, error_message=f"provider says {status}"))
    sdk = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
    with pytest.raises(error_class) as caught:
        sdk.chat.completions.create(model=MODEL, messages=USER)
    assert caught.value.status_code == status
    assert f"provider says {status}" in caught.value.message


def test_upstream_error_never_echoes_the_key(url: str, upstream: FakeUpstream) -> None:
    upstream.queue(Reply(status=401, error_message=f"Incorrect API key provided: {UPSTREAM_KEY}."))
    response = post(url, {"model": MODEL, "messages": USER})
    error = assert_openai_error(response, 401)
    assert UPSTREAM_KEY not in response.text
    assert UPSTREAM_KEY[:12] not in response.text
    assert "Incorrect API key provided" in error["message"]


def test_unreachable_upstream_is_502(upstream: FakeUpstream, start_proxy: Any, lean: bool) -> None:
    config = proxy_config(upstream, server={"lean_upstream": lean})
    config["model_list"][0]["litellm_params"]["api_base"] = "http://127.0.0.1:9/"
    url = start_proxy(config)
    assert_openai_error(post(url, {"model": MODEL, "messages": USER}), 502)


def test_stalled_upstream_times_out_as_504(
    upstream: FakeUpstream, start_proxy: Any, lean: bool
) -> None:
    url = start_proxy(
        proxy_config(upstream, server={"lean_upstream": lean, "request_timeout_seconds": 0.5})
    )
    upstream.queue(Reply(stall_seconds=3))
    assert_openai_error(post(url, {"model": MODEL, "messages": USER}), 504)


def test_failure_mid_stream_sends_error_event_and_no_done(url: str, upstream: FakeUpstream) -> None:
    upstream.queue(Reply(content="a b c d e f g h", fail_after_chunks=3))
    body = {"model": MODEL, "messages": USER, "stream": True}
    events = []
    with httpx.stream("POST", url + "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert events, "some chunks arrive before the failure"
    assert '"error"' in events[-1]
    assert "data: [DONE]" not in events


def test_error_before_stream_starts_is_plain_json(url: str, upstream: FakeUpstream) -> None:
    upstream.queue(Reply(status=429, error_message="slow down"))
    response = post(url, {"model": MODEL, "messages": USER, "stream": True})
    assert assert_openai_error(response, 429)["message"].endswith("slow down")


def test_unknown_route_is_openai_shaped(url: str) -> None:
    assert_openai_error(httpx.get(url + "/v1/nothing-here"), 404)
    assert_openai_error(httpx.get(url + "/v1/chat/completions"), 405)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/messages", {"max_tokens": 10, "temperature": 1.5}, "temperature"),
        ("/v1/messages", {"max_tokens": 10, "top_k": -1}, "top_k"),
        ("/v1/messages", {"max_tokens": 0}, "max_tokens"),
        ("/v1/responses", {"temperature": -0.5}, "temperature"),
        ("/v1/responses", {"max_output_tokens": 0}, "max_output_tokens"),
    ],
)
def test_each_door_refuses_values_out_of_range_before_payment(
    url: str, upstream: FakeUpstream, path: str, body: dict, param: str
) -> None:
    said = {"messages": USER} if path == "/v1/messages" else {"input": "hi"}
    answer = httpx.post(url + path, json={"model": MODEL, **said, **body}, timeout=10)
    assert answer.status_code == 400, answer.text
    assert param in answer.text
    assert upstream.requests == []


def test_values_at_the_ends_of_their_ranges_go_through(url: str, upstream: FakeUpstream) -> None:
    body = {"model": MODEL, "messages": USER, "temperature": 2, "top_p": 0, "n": 1}
    assert post(url, body | {"max_tokens": 1}).status_code == 200
    assert upstream.chat_requests()[-1].body["temperature"] == 2
