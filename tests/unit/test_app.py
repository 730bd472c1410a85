"""The HTTP app in this process (Starlette's test client, no server, no socket): what a
caller gets back at the edge, where no upstream answer is needed. Each door's bad
request in its own API's error shape; keys let in only their callers; a provider that
cannot be reached is a clear error that stores nothing; a count needs no model call."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from proxy.config.settings import hash_key
from proxy.http.app import create_app
from tests.unit.engines import MODEL, settings

KEY = "sk-proxy-unit-key"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The real app on a disk store in a temp dir; its one model's provider is an address
    nothing listens at (127.0.0.1:9); callers present `KEY`."""
    config = settings(
        session={"path": str(tmp_path_factory.mktemp("sessions"))},
        auth={"keys": [{"key_hash": hash_key(KEY), "tenant": "acme"}]},
    )
    with TestClient(create_app(config), base_url="http://localhost") as test_client:
        yield test_client


def chat(client: TestClient, body: Any, key: str | None = KEY, **headers: str) -> Any:
    given = {"Authorization": f"Bearer {key}"} if key else {}
    return client.post("/v1/chat/completions", json=body, headers=given | headers)


def test_a_caller_without_a_key_is_turned_away_in_openais_shape(client: TestClient) -> None:
    for key in (None, "sk-not-ours"):
        reply = chat(client, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}, key)
        assert reply.status_code == 401
        error = reply.json()["error"]
        assert error["type"] == "authentication_error" and error["message"]
        assert KEY not in reply.text


def test_a_bad_chat_body_is_a_clear_400_naming_the_field(client: TestClient) -> None:
    reply = chat(client, {"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] is not None and "messages[0]" in error["param"]
    reply = client.post(
        "/v1/chat/completions",
        content=b"{not json",
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    assert reply.status_code == 400 and reply.json()["error"]["type"] == "invalid_request_error"


def test_a_bad_messages_body_is_answered_in_anthropics_shape(client: TestClient) -> None:
    reply = client.post(
        "/v1/messages",
        json={"model": MODEL, "max_tokens": 10, "messages": "hi"},
        headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
    )
    assert reply.status_code == 400
    body = reply.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"


def test_a_bad_responses_body_is_answered_in_openais_shape(client: TestClient) -> None:
    reply = client.post(
        "/v1/responses",
        json={"model": MODEL, "input": [{"type": "no-such-item"}]},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["type"] == "invalid_request_error"


def test_an_unreachable_provider_is_a_clear_error_and_stores_no_turn(client: TestClient) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}]}
    reply = chat(client, body, **{"X-Session-Id": "s1"})
    assert 500 <= reply.status_code < 600
    error = reply.json()["error"]
    assert error["message"] and "sk-unit" not in reply.text  # the provider key stays ours
    session = client.get("/v1/sessions/s1", headers={"Authorization": f"Bearer {KEY}"})
    assert session.status_code == 404  # nothing the upstream did not finish is stored


def test_tokens_are_counted_without_a_model_call(client: TestClient) -> None:
    reply = client.post(
        "/v1/messages/count_tokens",
        json={"model": MODEL, "messages": [{"role": "user", "content": "one two three four"}]},
        headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
    )
    assert reply.status_code == 200
    assert 4 <= reply.json()["input_tokens"] < 40


def test_liveness_needs_no_key_and_a_path_not_served_is_a_404(client: TestClient) -> None:
    assert client.get("/health/live").status_code == 200
    missing = client.get("/v1/no-such-path", headers={"Authorization": f"Bearer {KEY}"})
    assert missing.status_code == 404
