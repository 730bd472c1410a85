"""No secret leaves the proxy: planted in upstream error texts and in request headers,
none of them appears in a response, a log line (text or JSON), /metrics or a store."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from proxy.cli.local import held_port
from tests.integration.test_sessions import is_summarizer, words
from tests.proxies import MODEL
from tests.servers import proxy_command, stop, wait_ready
from tests.upstream import FakeUpstream, Reply

# Shapes no pattern would recognise: only knowing the values can keep them out.
CONFIG_KEY = "correct horse battery staple 0417"  # model_list api_key
ENV_KEY = "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA"  # OPENAI_API_KEY, read by LiteLLM itself
PROXY_KEY = "cp_live_7Q2mX9vL4kR8wT1z"  # a proxy key, plain in the config file
ADMIN_KEY = "admin.4f9a2c7e1b.key"
CLIENT_TOKEN = "client.token.not-a-key.83hf"  # a bearer token that is no key
SECRETS = (CONFIG_KEY, ENV_KEY, PROXY_KEY, ADMIN_KEY, CLIENT_TOKEN)
ENV_MODEL = "env-model"


def echoing_secrets(body: dict[str, Any]) -> str | Reply:
    """A provider that repeats every secret in its errors: for the env-keyed model, and
    for summaries (a background failure the proxy only logs)."""
    planted = "Incorrect API key provided: " + " / ".join(SECRETS)
    if body["model"] == ENV_MODEL:
        return Reply(status=401, error_message=planted)
    if is_summarizer(body):
        return Reply(status=500, error_message=planted)
    return "noted"


def config(upstream: FakeUpstream, tmp_path: Path, store: dict[str, Any], log: str) -> Path:
    entry = {"model": f"openai/{MODEL}", "api_base": upstream.base_url}
    data = {
        "model_list": [
            {
                "model_name": MODEL,
                "litellm_params": {**entry, "api_key": CONFIG_KEY},
                "model_info": {"max_input_tokens": 1000},
            },
            {"model_name": ENV_MODEL, "litellm_params": {**entry, "model": f"openai/{ENV_MODEL}"}},
        ],
        "router_settings": {"num_retries": 0, "disable_cooldowns": True},  # see issue 12
        "server": {"log_format": log, "log_level": "debug"},
        "session": {"path": str(tmp_path / "sessions"), **store},
        "auth": {"keys": [{"key": PROXY_KEY}], "admin_keys": [{"key": ADMIN_KEY}]},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@contextmanager
def proxy(path: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    log = tmp_path / "proxy.log"
    command = proxy_command("serve", "--config", str(path))
    with held_port() as port, log.open("w") as output:
        env = {**os.environ, "OPENAI_API_KEY": ENV_KEY}
        process = subprocess.Popen(
            [*command, "--port", str(port)], env=env, stdout=output, stderr=subprocess.STDOUT
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, process)
            yield url, log
        finally:
            stop(process)


def headers(token: str = PROXY_KEY, **more: str) -> dict[str, str]:
    # Secrets in headers the proxy has no use for must not travel on either.
    return {
        "authorization": f"Bearer {token}",
        "x-api-key": CLIENT_TOKEN,
        "x-debug-secrets": " | ".join(SECRETS),
        **more,
    }


def traffic(url: str) -> list[httpx.Response]:
    """A session that grows past its summary trigger, errors of every kind, the APIs."""
    answers = []
    messages: list[dict[str, Any]] = []
    with httpx.Client(timeout=30) as client:
        for turn in range(8):
            messages.append({"role": "user", "content": words(40, f"t{turn}w")})
            answers.append(
                client.post(
                    f"{url}/v1/chat/completions",
                    json={"model": MODEL, "messages": messages},
                    headers=headers(**{"x-session-id": "leaky"}),
                )
            )
            messages.append({"role": "assistant", "content": "noted"})
        for stream in (False, True):
            body = {"model": ENV_MODEL, "messages": messages[:1], "stream": stream}
            answers.append(client.post(f"{url}/v1/chat/completions", json=body, headers=headers()))
        for token in (CLIENT_TOKEN, ADMIN_KEY.upper()):
            answers.append(client.get(f"{url}/v1/models", headers=headers(token)))
        answers.append(client.get(f"{url}/v1/sessions", headers=headers(ADMIN_KEY)))
        answers.append(client.get(f"{url}/v1/sessions/leaky", headers=headers()))
        answers.append(client.get(f"{url}/metrics"))
        # The other doors: the provider's planted 401, plain and streamed, and a session.
        first = messages[0]["content"]
        for stream in (False, True):
            body = {"model": ENV_MODEL, "max_tokens": 50, "messages": messages[:1]}
            answers.append(
                client.post(f"{url}/v1/messages", json=body | {"stream": stream}, headers=headers())
            )
            body = {"model": ENV_MODEL, "input": first, "stream": stream}
            answers.append(client.post(f"{url}/v1/responses", json=body, headers=headers()))
        body = {"model": MODEL, "max_tokens": 50, "messages": messages[:1]}
        answers.append(client.post(f"{url}/v1/messages", json=body, headers=headers()))
        body = {"model": MODEL, "input": first}
        answers.append(client.post(f"{url}/v1/responses", json=body, headers=headers()))
    return answers


def store_bytes(store: dict[str, Any], tmp_path: Path) -> bytes:
    if store["store"] == "disk":
        return b"".join(path.read_bytes() for path in (tmp_path / "sessions").iterdir())
    client = redis.Redis.from_url(store["redis_url"])
    dump = []
    for key in client.scan_iter():
        kind = client.type(key)
        if kind == b"hash":
            dump += [k + v for k, v in client.hgetall(key).items()]
        elif kind == b"list":
            dump += client.lrange(key, 0, -1)
        elif kind == b"zset":
            dump += client.zrange(key, 0, -1)
        elif kind == b"string":
            dump.append(client.get(key) or b"")
        dump.append(key)
    client.close()
    return b"\n".join(dump)


@pytest.mark.parametrize("store_name, log", [("disk", "text"), ("redis", "json")])
def test_no_secret_reaches_a_response_log_metric_or_store(
    upstream: FakeUpstream, tmp_path: Path, store_name: str, log: str, request: Any
) -> None:
    store: dict[str, Any] = {"store": store_name}
    if store_name == "redis":
        store["redis_url"] = request.getfixturevalue("redis_url")
    upstream.default = Reply(respond=echoing_secrets)
    with proxy(config(upstream, tmp_path, store, log), tmp_path) as (url, log_path):
        answers = traffic(url)
        # The summary the session asked for failed (logged), and nothing waits any more.
        summaries = [r for r in upstream.chat_requests() if is_summarizer(r.body)]
        assert summaries, "the session grew past its summary trigger"
    statuses = [answer.status_code for answer in answers]
    assert statuses[:8] == [200] * 8
    assert statuses[8:10] == [401, 401], "the provider's 401 comes back as a 401"
    assert "Incorrect API key provided" in answers[8].text  # the message, minus the secrets
    assert statuses[10:15] == [401, 401, 200, 200, 200]
    assert statuses[15:] == [401, 401, 401, 401, 200, 200]
    assert answers[15].json()["error"]["type"] == "authentication_error"  # Anthropic's shape
    # The provider got each deployment's own key, however it was configured.
    sent = {r.body["model"]: r.headers["authorization"] for r in upstream.chat_requests()}
    assert sent[f"{MODEL}"] == f"Bearer {CONFIG_KEY}"
    assert sent[ENV_MODEL] == f"Bearer {ENV_KEY}"

    places = {
        "responses": b"\n".join(
            str(answer.headers).encode() + answer.content for answer in answers
        ),
        "log": log_path.read_bytes(),
        "store": store_bytes(store, tmp_path),
    }
    assert b"summarization failed" in places["log"], "the failure was logged"
    for place, content in places.items():
        for secret in SECRETS:
            assert secret.encode() not in content, f"{secret!r} leaked into the {place}"
