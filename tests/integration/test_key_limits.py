"""A key limited to some models reaches no other model, on any path a request can take:
fallbacks (named, default and context-window ones), aliases, wildcard routes and retries,
on the lean path, LiteLLM's own and the native Messages route. A fallback the key may not
use is skipped and named in `X-Context-Fallbacks-Refused`."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.proxies import UPSTREAM_KEY
from tests.upstream import FakeUpstream, Reply

CHEAP_KEY = "cheap-only-key-0123456789abcdef"
BOTH_KEY = "cheap-and-expensive-key-0123456789"
TEAM_KEY = "cheap-and-team-key-0123456789abcdef"
EVERY_KEY = "every-model-key-0123456789abcdef"
USER = [{"role": "user", "content": "hi"}]
REFUSED = "x-context-fallbacks-refused"


def deployment(upstream: FakeUpstream, name: str, model: str) -> dict[str, Any]:
    params = {"model": model, "api_base": upstream.base_url, "api_key": UPSTREAM_KEY}
    if model.startswith("anthropic/"):
        params["api_base"] = upstream.base_url.removesuffix("/v1")
    return {"model_name": name, "litellm_params": params}


def config(upstream: FakeUpstream, lean: bool, **router: Any) -> dict[str, Any]:
    return {
        "model_list": [
            deployment(upstream, "chat-cheap", "openai/cheap-model"),
            deployment(upstream, "chat-expensive", "openai/expensive-model"),
            deployment(upstream, "team/*", "openai/*"),
            deployment(upstream, "claude-cheap", "anthropic/claude-haiku-4-5"),
            deployment(upstream, "claude-expensive", "anthropic/claude-opus-4-1"),
        ],
        "router_settings": {"num_retries": 1, "retry_after": 0, **router},
        "server": {"lean_upstream": lean},
        "auth": {
            "keys": [
                {"key": CHEAP_KEY, "models": ["chat-cheap", "claude-cheap"]},
                {"key": BOTH_KEY, "models": ["chat-cheap", "chat-expensive"]},
                {"key": TEAM_KEY, "models": ["chat-cheap", "team/*"]},
                {"key": EVERY_KEY},
            ]
        },
    }


def called(upstream: FakeUpstream) -> list[str]:
    return [r.body["model"] for r in upstream.requests]


def ask(url: str, key: str, stream: bool) -> httpx.Response:
    body = {"model": "chat-cheap", "messages": USER, "stream": stream}
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=30)


def down(upstream: FakeUpstream, times: int) -> None:
    upstream.queue(*[Reply(status=500, error_message="cheap is down")] * times)


ROUTER = {
    "fallbacks": [{"chat-cheap": ["chat-expensive"]}],
    "context_window_fallbacks": [{"chat-cheap": ["chat-expensive"]}],
    "default_fallbacks": ["chat-expensive"],
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_fallback_the_key_may_not_use_is_skipped_and_said(
    upstream: FakeUpstream, start_proxy: Any, lean: bool, stream: bool
) -> None:
    url = start_proxy(config(upstream, lean, **ROUTER))
    down(upstream, 2)  # the try and its one retry
    refused = ask(url, CHEAP_KEY, stream)
    assert refused.status_code == 500, refused.text
    assert refused.headers[REFUSED] == "chat-expensive"
    assert "cheap is down" in refused.json()["error"]["message"]
    assert called(upstream) == ["cheap-model", "cheap-model"]  # retried, never fallen back
    assert all(r.headers["authorization"] == f"Bearer {UPSTREAM_KEY}" for r in upstream.requests)

    # The same failure for a key that may use both: the fallback answers, nothing refused.
    upstream.requests.clear()
    down(upstream, 2)
    answered = ask(url, BOTH_KEY, stream)
    assert answered.status_code == 200, answered.text
    assert REFUSED not in answered.headers
    assert called(upstream) == ["cheap-model", "cheap-model", "expensive-model"]

    # A key limited to one model that answers: the header says what it would not get.
    upstream.requests.clear()
    fine = ask(url, CHEAP_KEY, stream)
    assert fine.status_code == 200 and fine.headers[REFUSED] == "chat-expensive"
    assert called(upstream) == ["cheap-model"]


def test_a_wildcard_route_the_key_may_use_is_a_fallback_it_gets(
    upstream: FakeUpstream, start_proxy: Any, lean: bool
) -> None:
    router = {"fallbacks": [{"chat-cheap": ["chat-expensive", "team/big-model"]}]}
    url = start_proxy(config(upstream, lean, **router))
    down(upstream, 3)  # cheap, its retry, and the first fallback if it were tried
    reply = ask(url, TEAM_KEY, stream=False)
    assert reply.status_code == 200, reply.text
    assert reply.headers[REFUSED] == "chat-expensive"
    assert "expensive-model" not in called(upstream)
    assert called(upstream)[-1] == "big-model"

    # The key that may use every model takes the fallbacks in their order.
    upstream.requests.clear()
    down(upstream, 2)
    every = ask(url, EVERY_KEY, stream=False)
    assert every.status_code == 200 and REFUSED not in every.headers
    assert called(upstream) == ["cheap-model", "cheap-model", "expensive-model"]


def test_an_alias_of_a_model_the_key_may_not_use_is_refused(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    proxy = config(upstream, True, model_group_alias={"gpt-big": "chat-expensive"})
    url = start_proxy(proxy)
    sdk = openai.OpenAI(base_url=url + "/v1", api_key=CHEAP_KEY, max_retries=0)
    for model in ("gpt-big", "chat-expensive", "team/big-model"):
        with pytest.raises(openai.PermissionDeniedError):
            sdk.chat.completions.create(model=model, messages=USER)
    assert upstream.requests == []


def test_the_native_messages_route_keeps_the_limit_through_fallbacks(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    url = start_proxy(config(upstream, True, fallbacks=[{"claude-cheap": ["claude-expensive"]}]))
    upstream.queue(*[Reply(status=500, error_message="haiku is down")] * 2)
    client = anthropic.Anthropic(base_url=url, api_key=CHEAP_KEY, max_retries=0)
    with pytest.raises(anthropic.InternalServerError) as failed:
        client.messages.create(model="claude-cheap", max_tokens=64, messages=USER)
    assert failed.value.response.headers[REFUSED] == "claude-expensive"
    assert called(upstream) == ["claude-haiku-4-5", "claude-haiku-4-5"]

    upstream.requests.clear()
    upstream.queue(*[Reply(status=500, error_message="haiku is down")] * 2)
    every = anthropic.Anthropic(base_url=url, api_key=EVERY_KEY, max_retries=0)
    reply = every.messages.create(model="claude-cheap", max_tokens=64, messages=USER)
    assert reply.content[0].text
    assert called(upstream) == ["claude-haiku-4-5", "claude-haiku-4-5", "claude-opus-4-1"]


def test_a_context_window_fallback_keeps_the_limit(
    upstream: FakeUpstream, start_proxy: Any, lean: bool
) -> None:
    router = {"context_window_fallbacks": [{"chat-cheap": ["chat-expensive"]}]}
    url = start_proxy(config(upstream, lean, **router))
    too_long = Reply(
        status=400,
        error_message="This model's maximum context length is 8192 tokens. However, your "
        "messages resulted in 9100 tokens. Please reduce the length of the messages.",
    )
    upstream.queue(too_long)
    refused = ask(url, CHEAP_KEY, stream=False)
    assert refused.status_code == 400, refused.text
    assert refused.headers[REFUSED] == "chat-expensive"
    assert called(upstream) == ["cheap-model"]

    upstream.requests.clear()
    upstream.queue(too_long)
    answered = ask(url, BOTH_KEY, stream=False)
    assert answered.status_code == 200, answered.text
    assert called(upstream) == ["cheap-model", "expensive-model"]
