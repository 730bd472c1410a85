"""The proxy as users install it: `context-proxy serve` from `.venv-deploy`, which the
test command builds from deploy/requirements.lock alone (the Quick start's line). Every
door streams, and answers whole, to every provider route the proxy speaks natively, with
a session long enough to be summarized: a module that LiteLLM imports on one of those
paths and the deploy lock lacks (fastapi, once) is a 502 here, not on a user's machine.
The suite's own `.venv` adds test tools to the same pins (`tests/test_supply_chain.py`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import yaml

from proxy.cli.local import held_port
from tests.integration.test_metrics import delta, scrape
from tests.proxies import MODEL, UPSTREAM_KEY, proxy_config
from tests.servers import start, stop, wait_ready
from tests.summarizing import asks_summary
from tests.upstream import FakeUpstream, Reply

KEY = "deploy-install-key-0123456789"
NATIVE = "gpt-native"  # OpenAI's Responses API, as LiteLLM's Responses route sends it
CLAUDE = "claude-sonnet-4-5"  # Anthropic's Messages API, through LiteLLM's Anthropic route
WINDOW = 4096  # every model's input limit: a few long turns reach a summary


def deploy_config(upstream: FakeUpstream) -> dict[str, Any]:
    config = proxy_config(upstream, auth={"keys": [{"key": KEY}]})
    limits = {"max_input_tokens": WINDOW, "max_output_tokens": 256}
    config["model_list"][0]["model_info"] = limits
    config["model_list"] += [
        {
            "model_name": NATIVE,
            "litellm_params": {
                "model": f"openai/{MODEL}",
                "api_base": upstream.base_url,
                "api_key": UPSTREAM_KEY,
            },
            "model_info": {"native_api": True, **limits},
        },
        {
            "model_name": CLAUDE,
            "litellm_params": {
                "model": f"anthropic/{CLAUDE}",
                "api_base": upstream.base_url.removesuffix("/v1"),
                "api_key": UPSTREAM_KEY,
            },
            "model_info": limits,
        },
    ]
    return config


@contextmanager
def deployed(upstream: FakeUpstream, directory: Path) -> Iterator[tuple[str, list[str]]]:
    """The deploy install's proxy (`tests.servers.start` runs it from `.venv-deploy`, whose
    packages `tests/test_supply_chain.py` checks against the deploy lock); yields its URL
    and, once stopped, what it printed."""
    config = deploy_config(upstream)
    config["session"] = {"path": str(directory / "sessions")}
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    output: list[str] = []
    with held_port() as port:
        args = ["--config", str(path), "--port", str(port)]
        process = start(args, directory / "net.log", directory)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process)
        yield url, output
    finally:
        output.append(stop(process))


def long_answers(body: dict[str, Any]) -> str:
    """About 500 tokens a turn, so that ten turns outgrow a 4k window's budget; the
    summarizer's answer (its prompt first, or as the Messages API's `system`) is short."""
    if asks_summary(body):
        return "The user sent numbered turns; each answer was long."
    return " ".join(f"w{i}" for i in range(250)) + " done."


def turn(url: str, door: str, model: str, session: str, n: int, stream: bool) -> str:
    """One turn of `session` through `door`, sent alone: the reply's text."""
    return send(url, door, model, session, [{"role": "user", "content": f"turn {n}"}], stream)


def send(
    url: str, door: str, model: str, session: str, messages: list[dict[str, str]], stream: bool
) -> str:
    """`messages` through `door`, as its SDK sends them; the reply's text."""
    headers = {"X-Session-Id": session}
    if door == "messages":
        client = anthropic.Anthropic(
            base_url=url, api_key=KEY, max_retries=0, default_headers=headers, timeout=60
        )
        if stream:
            with client.messages.stream(model=model, max_tokens=256, messages=messages) as s:
                final = s.get_final_message()
        else:
            final = client.messages.create(model=model, max_tokens=256, messages=messages)
        assert final.stop_reason == "end_turn", final
        return "".join(block.text for block in final.content if block.type == "text")
    sdk = openai.OpenAI(
        base_url=url + "/v1", api_key=KEY, max_retries=0, default_headers=headers, timeout=60
    )
    if door == "responses":
        if stream:
            with sdk.responses.stream(model=model, input=messages) as events:
                response = events.get_final_response()
        else:
            response = sdk.responses.create(model=model, input=messages)
        assert response.status == "completed", response
        return response.output_text
    if stream:
        chunks = list(sdk.chat.completions.create(model=model, messages=messages, stream=True))
        assert [c for c in chunks if c.choices][-1].choices[0].finish_reason == "stop"
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reply = sdk.chat.completions.create(model=model, messages=messages)
    return reply.choices[0].message.content or ""


@pytest.mark.parametrize("door", ["chat", "messages", "responses"])
def test_every_door_to_every_native_route_on_the_deploy_install(
    door: str, upstream: FakeUpstream, tmp_path: Path
) -> None:
    upstream.default = Reply(respond=long_answers)
    with deployed(upstream, tmp_path) as (url, output):
        before = scrape(url)
        for model in (MODEL, NATIVE, CLAUDE):
            for stream in (True, False):
                session = f"{door}-{model}-{'stream' if stream else 'whole'}"
                for n in range(10):  # each turn sent alone: the session holds the rest
                    reply = turn(url, door, model, session, n, stream)
                    assert reply.endswith("done."), (door, model, stream, n, reply[-200:])
        after = scrape(url)
    for model in (MODEL, NATIVE, CLAUDE):
        summarized = delta(
            before,
            after,
            "context_proxy_compressions_total",
            api=door,
            model=model,
            method="summary",
        )
        assert summarized > 0, f"{door} to {model}: no turn was summarized"
    failed = {
        labels: value - before.get((name, labels), 0.0)
        for (name, labels), value in after.items()
        if name == "context_proxy_requests_total" and dict(labels)["status"][0] != "2"
    }
    assert not any(failed.values()), failed
    paths = {r.path for r in upstream.requests}
    native = {"chat": "/v1/messages", "messages": "/v1/messages", "responses": "/v1/responses"}
    assert {"/v1/chat/completions", native[door]} <= paths, paths
    [printed] = output
    assert "Traceback" not in printed and "No module named" not in printed, printed[-3000:]
