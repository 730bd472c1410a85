"""An upstream's failure reaches the client in the proxy's own words with the provider's
message in them, on every door and route, whole and streamed, and never with LiteLLM's
class names, retry notes, model-group dumps or advice to its own users."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.proxies import MODEL, UPSTREAM_KEY, proxy_config
from tests.upstream import FakeUpstream, Reply

WORDS = "the provider says the quota for this project is spent"
# What LiteLLM puts around a provider's message: a client of this proxy has no use for it.
LITELLM_NOISE = re.compile(
    r"litellm|Exception\b|Error:|Handle with|model_group|Model Group|Fallbacks|Retried"
    r"|docs\.|Traceback|NoneType|\bkwargs\b",
    re.IGNORECASE,
)
NATIVE_GPT, CLAUDE = "native-gpt", "claude-native"


def config(upstream: FakeUpstream) -> dict[str, Any]:
    base = proxy_config(upstream, router_settings={"num_retries": 0, "disable_cooldowns": True})
    base["model_list"] += [
        {
            "model_name": NATIVE_GPT,
            "litellm_params": {
                "model": "openai/gpt-5-mini",
                "api_base": upstream.base_url,
                "api_key": UPSTREAM_KEY,
            },
            "model_info": {"native_api": True},
        },
        {
            "model_name": CLAUDE,
            "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5",
                "api_base": upstream.base_url.removesuffix("/v1"),
                "api_key": UPSTREAM_KEY,
            },
        },
    ]
    return base


@pytest.fixture(scope="module")
def module_url_config(_shared_upstream: FakeUpstream) -> dict[str, Any]:
    return config(_shared_upstream)


# (door path, model, body): every route a request can take to a provider.
ROUTES = {
    "chat": ("/v1/chat/completions", MODEL, {"messages": [{"role": "user", "content": "hi"}]}),
    "messages-native": (
        "/v1/messages",
        CLAUDE,
        {"max_tokens": 32, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "messages-translated": (
        "/v1/messages",
        MODEL,
        {"max_tokens": 32, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "responses-native": ("/v1/responses", NATIVE_GPT, {"input": "hi"}),
    "responses-translated": ("/v1/responses", MODEL, {"input": "hi"}),
}


def error_text(response: httpx.Response) -> str:
    """The error's message: the body's, or the stream's error event's."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data: ") and '"error"' in line:
                return httpx.Response(200, content=line[6:]).json()["error"]["message"]
        raise AssertionError(f"no error event in {response.text[-500:]}")
    return response.json()["error"]["message"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("status", [400, 401, 404, 429, 500, 503])
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_the_providers_message_in_the_proxys_words(
    module_url: str, upstream: FakeUpstream, route: str, status: int, stream: bool
) -> None:
    path, model, body = ROUTES[route]
    upstream.queue(Reply(status=status, error_message=WORDS))
    response = httpx.post(
        module_url + path,
        json={"model": model, **body, "stream": stream},
        headers={"Authorization": "Bearer client-key-0123456789abcdef"},
        timeout=30,
    )
    assert response.status_code == status or (status >= 500 and response.status_code >= 500)
    message = error_text(response)
    assert WORDS in message, message
    assert not LITELLM_NOISE.search(message), message


def test_an_unreachable_provider_is_said_plainly(upstream: FakeUpstream, start_proxy: Any) -> None:
    broken = config(upstream)
    for entry in broken["model_list"]:
        entry["litellm_params"]["api_base"] = "http://127.0.0.1:9/"
    proxied = start_proxy(broken)
    for name, (path, model, body) in ROUTES.items():
        response = httpx.post(proxied + path, json={"model": model, **body}, timeout=30)
        assert response.status_code == 502, (name, response.text)
        message = error_text(response)
        assert not LITELLM_NOISE.search(message), (name, message)


def test_a_model_resting_after_failures_is_said_plainly(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """The Router benches deployments that answered 429; once all of a model's are
    benched, the client hears that in a sentence, not the Router's dump of deployment ids."""
    pool = [
        {
            "model_name": "pool",
            "litellm_params": {
                "model": f"openai/{name}",
                "api_base": upstream.base_url,
                "api_key": UPSTREAM_KEY,
            },
        }
        for name in ("model-a", "model-b")
    ]
    router = {"num_retries": 0, "cooldown_time": 60}
    resting = start_proxy({"model_list": pool, "router_settings": router})
    upstream.default = Reply(status=429, error_message=WORDS)
    messages: list[str] = []
    try:
        for _ in range(20):
            body = {"model": "pool", "messages": [{"role": "user", "content": "hi"}]}
            answer = httpx.post(resting + "/v1/chat/completions", json=body, timeout=30)
            messages.append(error_text(answer))
            if not messages[-1].startswith(WORDS):
                break
    finally:
        upstream.default = Reply()
    assert WORDS in messages[0]
    assert messages[-1].startswith("Every deployment of this model failed just now"), messages
    assert not any(LITELLM_NOISE.search(m) or "cooldown" in m for m in messages), messages
