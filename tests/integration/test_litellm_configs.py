"""A LiteLLM config works as it says or fails at start in one line saying why: its
master key, retries, fallbacks, drop_params, aliases, wildcard routes and environment
variables are honoured; what context-proxy does not have is refused aloud; every
example config LiteLLM ships starts or fails in one line."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from proxy.cli.local import held_port
from tests.integration.test_messages import CLAUDE, claude_config
from tests.integration.test_metrics import delta, scrape
from tests.proxies import MODEL, UPSTREAM_KEY, proxy_config
from tests.servers import proxy_command, start, stop, wait_ready
from tests.upstream import FakeUpstream, Reply

# LiteLLM's own example configs, from its installed package (found without importing it).
EXAMPLES = Path(importlib.util.find_spec("litellm").origin).parent / "proxy" / "example_config_yaml"
MASTER = "sk-master-0123456789abcdef"
SAY = [{"role": "user", "content": "hello"}]


def sdk(url: str, key: str = "anyone") -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)


def test_the_master_key_is_an_admin_key(upstream: FakeUpstream, start_proxy) -> None:
    url = start_proxy(proxy_config(upstream, general_settings={"master_key": MASTER}))
    with pytest.raises(openai.AuthenticationError):
        sdk(url, "not-the-master-key").chat.completions.create(model=MODEL, messages=SAY)
    assert httpx.post(url + "/v1/chat/completions", json={"model": MODEL}).status_code == 401
    reply = sdk(url, MASTER).chat.completions.create(model=MODEL, messages=SAY)
    assert reply.choices[0].message.content == "echo: hello"
    # An admin: it may name any tenant.
    listed = httpx.get(
        url + "/v1/sessions",
        params={"tenant": "team-x"},
        headers={"Authorization": f"Bearer {MASTER}"},
    )
    assert listed.status_code == 200


def test_litellm_settings_retries_and_fallbacks_are_the_routers(
    upstream: FakeUpstream, start_proxy
) -> None:
    config = proxy_config(upstream)
    backup = {**config["model_list"][0], "model_name": "backup"}
    backup["litellm_params"] = {**backup["litellm_params"], "model": "openai/backup-model"}
    config["model_list"].append(backup)
    config["router_settings"] = {}
    config["litellm_settings"] = {"num_retries": 2, "fallbacks": [{MODEL: ["backup"]}]}
    url = start_proxy(config)

    def failing_primary(body: dict[str, Any]) -> Reply:
        if body["model"] == MODEL:
            return Reply(status=500, error_message="primary down")
        return Reply(content="from the backup")

    upstream.default = Reply(respond=failing_primary)
    reply = sdk(url).chat.completions.create(model=MODEL, messages=SAY)
    assert reply.choices[0].message.content == "from the backup"
    models = [r.body["model"] for r in upstream.chat_requests()]
    assert models == [MODEL] * 3 + ["backup-model"]  # tried, retried twice, fallen back


def test_drop_params_false_refuses_what_the_model_does_not_take(
    upstream: FakeUpstream, start_proxy
) -> None:
    url = start_proxy(proxy_config(upstream, litellm_settings={"drop_params": False}))
    body = {"model": MODEL, "max_tokens": 64, "top_k": 5, "messages": SAY}
    response = httpx.post(url + "/v1/messages", json=body, headers={"x-api-key": "k"})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "`top_k`" in response.json()["error"]["message"]
    assert upstream.requests == []


def test_drop_params_true_lets_litellm_drop_what_the_provider_cannot_take(
    upstream: FakeUpstream, start_proxy
) -> None:
    asked = {"model": CLAUDE, "messages": SAY, "logit_bias": {"50256": -100}}
    strict = start_proxy(claude_config(upstream))
    refused = httpx.post(strict + "/v1/chat/completions", json=asked)
    assert refused.status_code == 400 and "logit_bias" in refused.text
    assert upstream.requests == []

    url = start_proxy(claude_config(upstream, litellm_settings={"drop_params": True}))
    answered = httpx.post(url + "/v1/chat/completions", json=asked)
    assert answered.status_code == 200, answered.text
    assert "logit_bias" not in upstream.messages_requests()[-1].body


def test_aliases_serve_their_models_and_hidden_ones_are_not_listed(
    upstream: FakeUpstream, start_proxy
) -> None:
    aliases = {"gpt-4": MODEL, "secret-name": {"model": MODEL, "hidden": True}}
    url = start_proxy(proxy_config(upstream, router_settings={"model_group_alias": aliases}))
    for name in ("gpt-4", "secret-name"):
        reply = sdk(url).chat.completions.create(model=name, messages=SAY)
        assert reply.choices[0].message.content == "echo: hello"
        assert upstream.chat_requests()[-1].body["model"] == MODEL
    listed = [m.id for m in sdk(url).models.list()]
    assert listed == [MODEL, "gpt-4"]


def test_wildcard_routes_serve_any_model_they_match(upstream: FakeUpstream, start_proxy) -> None:
    config = proxy_config(upstream)
    params = config["model_list"][0]["litellm_params"]
    config["model_list"] = [
        {"model_name": "openai/*", "litellm_params": {**params, "model": "openai/*"}},
        {"model_name": "team/*", "litellm_params": {**params, "model": "openai/*"}},
    ]
    url = start_proxy(config)
    before = scrape(url)
    for asked, sent in (("openai/gpt-4o-mini", "gpt-4o-mini"), ("team/gpt-4o", "gpt-4o")):
        response = httpx.post(
            url + "/v1/chat/completions",
            json={"model": asked, "messages": SAY},
            headers={"X-Session-Id": f"wild-{sent}"},
        )
        assert response.status_code == 200, response.text
        assert upstream.chat_requests()[-1].body["model"] == sent
        # Budgeted by the model the route names (LiteLLM's map), not a default.
        assert int(response.headers["x-context-tokens-sent"]) > 0
    after = scrape(url)
    for label in ("openai/*", "team/*"):  # the route's own name: a bounded label
        assert (
            delta(
                before, after, "context_proxy_requests_total", model=label, api="chat", status="200"
            )
            == 1
        )
    unmatched = httpx.post(url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": SAY})
    assert unmatched.status_code == 404
    assert unmatched.json()["error"]["code"] == "model_not_found"


def serve_fails(tmp_path: Path, config: dict[str, Any], env: dict[str, str] | None = None) -> str:
    """`context-proxy serve` with `config`: its one line on stderr, having exited 2."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        proxy_command("serve", "--config", str(path), "--port", "9"),
        capture_output=True,
        text=True,
        timeout=120,
        env={**env} if env is not None else None,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("context-proxy: "), done.stderr
    return lines[0]


def test_what_context_proxy_does_not_have_is_refused_in_one_line(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    config = proxy_config(
        upstream,
        litellm_settings={"callbacks": ["langfuse"], "drop_params": True},
        general_settings={"master_key": MASTER, "database_url": "postgresql://127.0.0.1/x"},
    )
    line = serve_fails(tmp_path, config)
    assert "litellm_settings.callbacks: not supported" in line
    assert "general_settings.database_url: not supported" in line
    assert "postgresql" not in line and MASTER not in line  # values are never echoed
    assert "drop_params" not in line and "master_key" not in line  # those are honoured

    unknown = serve_fails(
        tmp_path, proxy_config(upstream, context={"summary_model": "nonexistent"})
    )
    assert "context.summary_model: `nonexistent` is not a model this proxy serves" in unknown
    provider = proxy_config(upstream)
    provider["model_list"][0]["litellm_params"]["model"] = "mistralai/mistral-7b-instruct"
    assert "LiteLLM knows no provider for `mistralai/mistral-7b-instruct`" in serve_fails(
        tmp_path, provider
    )


def test_environment_variables_are_set_for_the_models(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    config = proxy_config(upstream, environment_variables={"TEST_UPSTREAM_KEY": UPSTREAM_KEY})
    config["model_list"][0]["litellm_params"]["api_key"] = "os.environ/TEST_UPSTREAM_KEY"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    with held_port() as port:
        process = start(
            ["--config", str(path), "--port", str(port)], tmp_path / "net.log", tmp_path
        )
        try:
            wait_ready(f"http://127.0.0.1:{port}", process)
            sdk(f"http://127.0.0.1:{port}").chat.completions.create(model=MODEL, messages=SAY)
        finally:
            stop(process)
    assert upstream.chat_requests()[-1].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"


def _stand_ins(text: str) -> dict[str, str]:
    """A loopback value for every `os.environ/…` an example refers to."""
    names = set(re.findall(r"os\.environ/([A-Z0-9_]+)", text))
    return {
        name: "http://127.0.0.1:9/" if "BASE" in name or "URL" in name else "test-value"
        for name in names
    }


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_litellms_example_configs_start_or_fail_in_one_line(
    example: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in _stand_ins(example.read_text()).items():
        monkeypatch.setenv(name, value)
    netlog = tmp_path / "net.log"
    with held_port() as port:
        process = start(["--config", str(example), "--port", str(port)], netlog, tmp_path)
        try:
            started = _serving(f"http://127.0.0.1:{port}", process)
        finally:
            exited = process.poll()
            output = stop(process)
    if not started:
        lines = output.splitlines()
        assert exited == 2 and len(lines) == 1, output
        assert lines[0].startswith("context-proxy: "), output
    assert not netlog.exists() or netlog.read_text() == ""


def _serving(url: str, process: subprocess.Popen[bytes]) -> bool:
    """True once `url` serves, False once the process has exited."""
    began = time.monotonic()
    while time.monotonic() - began < 90:
        if process.poll() is not None:
            return False
        try:
            if httpx.get(url + "/health/live", timeout=1).status_code == 200:
                return True
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("the proxy neither served nor exited")


def test_router_errors_are_logged_in_one_line(upstream: FakeUpstream, tmp_path: Path) -> None:
    config = proxy_config(upstream, litellm_settings={"fallbacks": [{MODEL: ["backup"]}]})
    backup = {**config["model_list"][0], "model_name": "backup"}
    config["model_list"].append(backup)
    config["server"] = {"lean_upstream": False}  # LiteLLM's own call, and its own logging
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    upstream.default = Reply(status=500, error_message=f"all down, key {UPSTREAM_KEY}")
    with held_port() as port:
        process = start(
            ["--config", str(path), "--port", str(port)], tmp_path / "net.log", tmp_path
        )
        try:
            wait_ready(f"http://127.0.0.1:{port}", process)
            response = httpx.post(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                json={"model": MODEL, "messages": SAY},
                timeout=60,
            )
            assert response.status_code == 500
        finally:
            output = stop(process)
    router_lines = [line for line in output.splitlines() if "LiteLLM Router" in line]
    assert router_lines, output  # LiteLLM did log the failed fallback
    # Every line is a record of its own (time first): no traceback, no debug dump.
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", line) for line in output.splitlines())
    assert UPSTREAM_KEY not in output


def test_a_key_limited_to_a_wildcard_route_may_use_what_it_matches(
    upstream: FakeUpstream, start_proxy
) -> None:
    config = proxy_config(
        upstream, auth={"keys": [{"key": "team-key-0123456789abcdef", "models": ["team/*"]}]}
    )
    params = config["model_list"][0]["litellm_params"]
    config["model_list"].append(
        {"model_name": "team/*", "litellm_params": {**params, "model": "openai/*"}}
    )
    url = start_proxy(config)
    team = sdk(url, "team-key-0123456789abcdef")
    assert team.chat.completions.create(model="team/gpt-4o", messages=SAY).choices
    with pytest.raises(openai.PermissionDeniedError):
        team.chat.completions.create(model=MODEL, messages=SAY)
