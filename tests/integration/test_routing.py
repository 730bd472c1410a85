"""LiteLLM stays the router on both paths: which path a request takes, retries exactly
as configured, fallbacks to a second deployment, cooldowns of a failing one."""

from __future__ import annotations

import contextlib
from typing import Any

import openai

from tests.proxies import MODEL, UPSTREAM_KEY
from tests.upstream import FakeUpstream, Reply
from tests.waiting import eventually

USER = [{"role": "user", "content": "hi"}]


def deployment(upstream: FakeUpstream, name: str, model: str) -> dict[str, Any]:
    params = {"model": f"openai/{model}", "api_base": upstream.base_url, "api_key": UPSTREAM_KEY}
    return {"model_name": name, "litellm_params": params}


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="client-key", max_retries=0)


def models_called(upstream: FakeUpstream) -> list[str]:
    return [r.body["model"] for r in upstream.chat_requests()]


def test_each_path_is_the_one_taken(upstream: FakeUpstream, start_proxy: Any, lean: bool) -> None:
    """The lean path posts with its own HTTP client; LiteLLM's goes through the openai SDK."""
    url = start_proxy(
        {
            "model_list": [deployment(upstream, MODEL, "gpt-4o-mini")],
            "server": {"lean_upstream": lean},
        }
    )
    for stream in (False, True):
        reply = sdk(url).chat.completions.create(model=MODEL, messages=USER, stream=stream)
        if stream:
            assert "".join(c.choices[0].delta.content or "" for c in reply if c.choices)
    agents = [r.headers.get("user-agent", "") for r in upstream.chat_requests()]
    assert len(agents) == 2
    if lean:
        assert all("aiohttp" in agent for agent in agents), agents
    else:
        assert all("OpenAI" in agent for agent in agents), agents


def test_retries_are_exactly_what_router_settings_say(
    upstream: FakeUpstream, start_proxy: Any, lean: bool
) -> None:
    config = {
        "model_list": [deployment(upstream, MODEL, "gpt-4o-mini")],
        "router_settings": {"num_retries": 2, "retry_after": 0},
        "server": {"lean_upstream": lean},
    }
    url = start_proxy(config)
    upstream.queue(Reply(status=500), Reply(status=500))
    reply = sdk(url).chat.completions.create(model=MODEL, messages=USER)
    assert reply.choices[0].message.content == "echo: hi"
    assert len(upstream.chat_requests()) == 3
    upstream.requests.clear()
    upstream.queue(*[Reply(status=500, error_message="still down")] * 3)
    try:
        sdk(url).chat.completions.create(model=MODEL, messages=USER)
        raise AssertionError("three failures with two retries must fail")
    except openai.InternalServerError as exc:
        assert "still down" in exc.message
    assert len(upstream.chat_requests()) == 3


def test_a_500_falls_back_to_the_second_deployment(
    upstream: FakeUpstream, start_proxy: Any, lean: bool
) -> None:
    config = {
        "model_list": [
            deployment(upstream, "primary", "primary-model"),
            deployment(upstream, "secondary", "secondary-model"),
        ],
        "router_settings": {"num_retries": 0, "fallbacks": [{"primary": ["secondary"]}]},
        "server": {"lean_upstream": lean},
    }
    url = start_proxy(config)
    upstream.queue(Reply(status=500, error_message="primary is down"))
    for stream in (False, True):
        if stream:
            upstream.queue(Reply(status=500, error_message="primary is down"))
        reply = sdk(url).chat.completions.create(model="primary", messages=USER, stream=stream)
        text = (
            "".join(c.choices[0].delta.content or "" for c in reply if c.choices)
            if stream
            else reply.choices[0].message.content
        )
        assert text == "echo: hi"
    assert models_called(upstream) == [
        "primary-model",
        "secondary-model",
        "primary-model",
        "secondary-model",
    ]


def test_a_rate_limited_deployment_cools_down(
    upstream: FakeUpstream, start_proxy: Any, lean: bool
) -> None:
    """LiteLLM benches a deployment that answered 429 when its group has another: the
    following requests all go to the other one."""
    config = {
        "model_list": [
            deployment(upstream, "pool", "model-a"),
            deployment(upstream, "pool", "model-b"),
        ],
        "router_settings": {"num_retries": 1, "retry_after": 0, "cooldown_time": 60},
        "server": {"lean_upstream": lean},
    }
    url = start_proxy(config)

    def respond(body: dict[str, Any]) -> str | Reply:
        return Reply(status=429, error_message="slow down") if body["model"] == "model-a" else "ok"

    upstream.default = Reply(respond=respond)
    for _ in range(30):  # until the shuffle has tried model-a
        # LiteLLM's path may retry on model-a before its failure is booked: a 429 then.
        with contextlib.suppress(openai.RateLimitError):
            sdk(url).chat.completions.create(model="pool", messages=USER)
        if "model-a" in models_called(upstream):
            break
    assert "model-a" in models_called(upstream)

    def twelve_to_b() -> bool:
        """12 requests, all answered by model-b (shuffling would pick model-a ~6 times)."""
        upstream.requests.clear()
        for _ in range(12):
            try:
                reply = sdk(url).chat.completions.create(model="pool", messages=USER)
            except openai.RateLimitError:  # model-a not benched yet (LiteLLM's path)
                return False
            assert reply.choices[0].message.content == "ok"
        return models_called(upstream) == ["model-b"] * 12

    # LiteLLM's own path books the failure from a logging callback that runs a moment
    # after the response (the lean path books it at once): once booked, model-a is
    # benched, and stays so for the cooldown's minute.
    eventually(twelve_to_b, "model-a to be benched")
    assert twelve_to_b(), models_called(upstream)
