"""Proxy keys, tenants and the admin key, through a real proxy and the openai SDK."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from proxy.config.settings import hash_key, load_settings
from tests.proxies import MODEL, UPSTREAM_KEY, proxy_config
from tests.servers import proxy_command
from tests.upstream import FakeUpstream

KEY_A = "cp-team-a-0123456789abcdef"
KEY_B = "cp-team-b-0123456789abcdef"
ADMIN = "cp-admin-0123456789abcdef"
OTHER_MODEL = "gpt-4o"
SESSION = "X-Session-Id"

KEYS = {
    "keys": [
        {"key": KEY_A, "tenant": "team-a"},
        {"key_hash": hash_key(KEY_B), "tenant": "team-b"},
    ],
    "admin_keys": [{"key": ADMIN}],
}


def two_models(upstream: FakeUpstream, **sections: Any) -> dict[str, Any]:
    config = proxy_config(upstream, **sections)
    second = {**config["model_list"][0], "model_name": OTHER_MODEL}
    config["model_list"].append(second)
    return config


@pytest.fixture
def url_config(upstream: FakeUpstream) -> dict[str, Any]:
    return two_models(upstream, auth=KEYS)


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def sdk(url: str, key: str, session: str | None = None) -> openai.OpenAI:
    headers = {SESSION: session} if session else {}
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, default_headers=headers)


def say(url: str, key: str, session: str | None, text: str, model: str = MODEL) -> str:
    reply = sdk(url, key, session).chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}]
    )
    return str(reply.choices[0].message.content)


def sessions(url: str, key: str, **params: Any) -> dict[str, Any]:
    response = httpx.get(f"{url}/v1/sessions", headers=bearer(key), params=params)
    assert response.status_code == 200, response.text
    return response.json()


def is_openai_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert set(error) == {"message", "type", "code", "param"}


# -- keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "credentials", [{}, bearer("cp-not-a-key-0123456789"), {"authorization": "Basic dXNlcjpwYXNz"}]
)
def test_without_a_valid_key_nothing_happens(
    url: str, upstream: FakeUpstream, credentials: dict[str, str]
) -> None:
    # Not even JSON: a 401 comes before the body is read, so it cannot be a 400.
    response = httpx.post(
        f"{url}/v1/chat/completions",
        content=b"{not json",
        headers={**credentials, SESSION: "s1", "content-type": "application/json"},
    )
    code = "invalid_api_key" if "Bearer cp-" in str(credentials) else "missing_api_key"
    is_openai_error(response, 401, code)
    assert "cp-not-a-key" not in response.text
    assert upstream.chat_requests() == []
    assert sessions(url, ADMIN)["data"] == []
    for path in ("/v1/models", "/v1/sessions", "/v1/sessions/s1"):
        assert httpx.get(url + path, headers=credentials).status_code == 401


def test_the_sdk_with_a_key_is_served(url: str, upstream: FakeUpstream) -> None:
    assert say(url, KEY_A, None, "hello there") == "echo: hello there"
    # The provider gets the configured provider key, never the caller's proxy key.
    assert upstream.chat_requests()[0].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    with pytest.raises(openai.AuthenticationError):
        say(url, "cp-wrong-0123456789", None, "hello")


def test_health_and_metrics_need_no_key(url: str) -> None:
    for path in ("/health/live", "/health/ready", "/metrics"):
        assert httpx.get(url + path).status_code == 200


def test_a_key_over_its_limit_gets_429_with_retry_after(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str]
) -> None:
    url = start_proxy(proxy_config(upstream, auth={"keys": [{"key": KEY_A, "rpm": 2}]}))
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    answers = [
        httpx.post(f"{url}/v1/chat/completions", json=body, headers=bearer(KEY_A)) for _ in range(3)
    ]
    assert [a.status_code for a in answers] == [200, 200, 429]
    is_openai_error(answers[2], 429, "rate_limit_exceeded")
    assert 1 <= int(answers[2].headers["retry-after"]) <= 30  # 2 a minute: one every 30 s
    assert len(upstream.chat_requests()) == 2
    with pytest.raises(openai.RateLimitError):
        say(url, KEY_A, None, "again")


def test_a_key_uses_only_its_models(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str]
) -> None:
    auth = {"keys": [{"key": KEY_A, "models": [MODEL]}]}
    url = start_proxy(two_models(upstream, auth=auth))
    models = httpx.get(f"{url}/v1/models", headers=bearer(KEY_A)).json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    with pytest.raises(openai.PermissionDeniedError, match="may not use"):
        say(url, KEY_A, None, "hi", model=OTHER_MODEL)
    assert upstream.chat_requests() == []
    assert say(url, KEY_A, None, "hi") == "echo: hi"


def test_keys_are_kept_only_as_hashes(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"auth": {"keys": [{"key": "os.environ/TEAM_KEY"}]}}))
    settings = load_settings(path, environ={"TEAM_KEY": KEY_A})
    assert KEY_A not in settings.model_dump_json()
    assert settings.auth.keys[0].key_hash == hash_key(KEY_A)


# -- tenants ------------------------------------------------------------------------------


@pytest.fixture
def session_of_a(url: str) -> dict[str, Any]:
    """Team A's session `shared-name`, two turns long."""
    say(url, KEY_A, "shared-name", "a's secret plan")
    say(url, KEY_A, "shared-name", "a's second turn")
    response = httpx.get(f"{url}/v1/sessions/shared-name", headers=bearer(KEY_A))
    assert response.status_code == 200
    return response.json()


def test_another_key_extending_the_same_id_gets_a_fresh_session(
    url: str, upstream: FakeUpstream, session_of_a: dict[str, Any]
) -> None:
    upstream.requests.clear()
    say(url, KEY_B, "shared-name", "b's question")
    sent = upstream.chat_requests()[0].body["messages"]
    assert sent == [{"role": "user", "content": "b's question"}]  # nothing of A's
    assert httpx.get(f"{url}/v1/sessions/shared-name", headers=bearer(KEY_A)).json() == session_of_a
    mine = httpx.get(f"{url}/v1/sessions/shared-name", headers=bearer(KEY_B)).json()
    assert [m["content"] for m in mine["messages"]] == ["b's question", "echo: b's question"]


def test_another_key_cannot_read_it(url: str, session_of_a: dict[str, Any]) -> None:
    response = httpx.get(f"{url}/v1/sessions/shared-name", headers=bearer(KEY_B))
    is_openai_error(response, 404, "session_not_found")
    assert "secret plan" not in response.text
    assert sessions(url, KEY_B)["data"] == []


def test_another_key_cannot_preview_it(url: str, session_of_a: dict[str, Any]) -> None:
    response = httpx.post(
        f"{url}/v1/sessions/shared-name/preview", json={"model": MODEL}, headers=bearer(KEY_B)
    )
    is_openai_error(response, 404, "session_not_found")
    mine = httpx.post(
        f"{url}/v1/sessions/shared-name/preview", json={"model": MODEL}, headers=bearer(KEY_A)
    )
    assert "secret plan" in mine.text


def test_another_key_cannot_see_what_its_turns_sent(url: str, session_of_a: dict[str, Any]) -> None:
    response = httpx.get(f"{url}/v1/sessions/shared-name/plans", headers=bearer(KEY_B))
    is_openai_error(response, 404, "session_not_found")
    for key, params in ((KEY_A, {}), (ADMIN, {"tenant": "team-a"})):
        mine = httpx.get(f"{url}/v1/sessions/shared-name/plans", params=params, headers=bearer(key))
        assert [record["model"] for record in mine.json()["data"]] == [MODEL, MODEL]
    refused = httpx.get(
        f"{url}/v1/sessions/shared-name/plans", params={"tenant": "team-a"}, headers=bearer(KEY_B)
    )
    is_openai_error(refused, 403, "permission_denied")


def test_another_key_cannot_delete_it(url: str, session_of_a: dict[str, Any]) -> None:
    response = httpx.delete(f"{url}/v1/sessions/shared-name", headers=bearer(KEY_B))
    is_openai_error(response, 404, "session_not_found")
    assert httpx.get(f"{url}/v1/sessions/shared-name", headers=bearer(KEY_A)).json() == session_of_a


def test_only_an_admin_names_a_tenant(url: str, session_of_a: dict[str, Any]) -> None:
    for call in (httpx.get, httpx.delete):
        response = call(
            f"{url}/v1/sessions/shared-name", params={"tenant": "team-a"}, headers=bearer(KEY_B)
        )
        is_openai_error(response, 403, "permission_denied")
    response = httpx.get(f"{url}/v1/sessions", params={"tenant": "team-a"}, headers=bearer(KEY_B))
    is_openai_error(response, 403, "permission_denied")


# -- the admin key ------------------------------------------------------------------------


def test_admin_lists_pages_of_every_tenant(url: str) -> None:
    for key, names in ((KEY_A, ["a1", "a2", "a3"]), (KEY_B, ["b1", "b2"])):
        for name in names:
            say(url, key, name, f"hello from {name}")
    everything = sessions(url, ADMIN)
    assert [(s["tenant"], s["id"]) for s in everything["data"]] == [
        ("team-a", "a1"),
        ("team-a", "a2"),
        ("team-a", "a3"),
        ("team-b", "b1"),
        ("team-b", "b2"),
    ]
    assert everything["has_more"] is False
    assert all(s["messages"] == 2 for s in everything["data"])

    pages, after = [], None
    while True:
        page = sessions(url, ADMIN, limit=2, **({"after": after} if after else {}))
        pages.append([s["id"] for s in page["data"]])
        if not page["has_more"]:
            break
        after = page["next_after"]
    assert pages == [["a1", "a2"], ["a3", "b1"], ["b2"]]

    assert [s["id"] for s in sessions(url, ADMIN, tenant="team-b")["data"]] == ["b1", "b2"]
    assert [s["id"] for s in sessions(url, KEY_A)["data"]] == ["a1", "a2", "a3"]
    bad = httpx.get(f"{url}/v1/sessions", params={"limit": "1000"}, headers=bearer(ADMIN))
    is_openai_error(bad, 400, "invalid_value")


def test_admin_reads_and_deletes_any_session(url: str, session_of_a: dict[str, Any]) -> None:
    where = {"tenant": "team-a"}
    read = httpx.get(f"{url}/v1/sessions/shared-name", params=where, headers=bearer(ADMIN))
    assert read.json() == session_of_a
    deleted = httpx.delete(f"{url}/v1/sessions/shared-name", params=where, headers=bearer(ADMIN))
    assert deleted.json()["deleted"] is True
    gone = httpx.get(f"{url}/v1/sessions/shared-name", headers=bearer(KEY_A))
    is_openai_error(gone, 404, "session_not_found")


# -- passthrough --------------------------------------------------------------------------


def test_passthrough_forwards_the_callers_own_key(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str]
) -> None:
    url = start_proxy(proxy_config(upstream, auth={"mode": "passthrough"}))
    own = "sk-caller-own-provider-key-42"
    assert say(url, own, "mine", "hi") == "echo: hi"
    assert upstream.chat_requests()[-1].headers["authorization"] == f"Bearer {own}"
    assert UPSTREAM_KEY not in str(upstream.chat_requests()[-1].headers)
    # Each provider key is a tenant of its own.
    other = httpx.get(f"{url}/v1/sessions/mine", headers=bearer("sk-someone-else-key-42"))
    is_openai_error(other, 404, "session_not_found")
    assert httpx.get(f"{url}/v1/sessions/mine", headers=bearer(own)).status_code == 200
    # No key at all: nothing to forward, and nothing of the config's is spent.
    response = httpx.post(f"{url}/v1/chat/completions", json={"model": MODEL, "messages": []})
    is_openai_error(response, 401, "missing_api_key")
    assert len(upstream.chat_requests()) == 1


def test_passthrough_streams_with_the_callers_key(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str]
) -> None:
    config = proxy_config(upstream, auth={"mode": "passthrough"}, server={"lean_upstream": False})
    url = start_proxy(config)
    own = "sk-caller-own-provider-key-43"
    stream = sdk(url, own).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "streamed hi"}], stream=True
    )
    assert (
        "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        == "echo: streamed hi"
    )
    assert upstream.chat_requests()[-1].headers["authorization"] == f"Bearer {own}"


# -- refusing to serve everyone -----------------------------------------------------------


def serve(tmp_path: Path, auth: dict[str, Any], host: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"auth": auth}))
    command = proxy_command("serve", "--config", str(path), "--host", host)
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "proxy.example"])
def test_no_keys_on_a_public_address_refuses_to_start(tmp_path: Path, host: str) -> None:
    done = serve(tmp_path, {}, host)
    assert done.returncode == 2
    assert f"refusing to serve on {host} without keys" in done.stderr
    assert "auth.allow_anonymous" in done.stderr


def test_loopback_and_allow_anonymous_are_accepted() -> None:
    from proxy.cli.main import anonymous_refusal
    from proxy.config.settings import Settings

    anonymous = Settings()
    for host in ("127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"):
        assert anonymous_refusal(anonymous, host) is None
    allowed = Settings.model_validate({"auth": {"allow_anonymous": True}})
    keyed = Settings.model_validate({"auth": {"keys": [{"key_hash": hash_key(KEY_A)}]}})
    passthrough = Settings.model_validate({"auth": {"mode": "passthrough"}})
    for settings in (allowed, keyed, passthrough):
        assert anonymous_refusal(settings, "0.0.0.0") is None
    assert anonymous_refusal(anonymous, "0.0.0.0") is not None
