"""LiteLLM stays the router on both paths: which path a request takes, retries exactly
as configured, fallbacks to a second deployment, cooldowns of a failing one."""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
import openai
import pytest

from tests.integration.test_messages import CLAUDE, claude_config
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


# -- a client's own request benches nothing -------------------------------------------

KEYS = {"team-a": "team-a-key-0123456789abcdef", "team-b": "team-b-key-0123456789abcdef"}


def tenants_config(upstream: FakeUpstream, lean: bool) -> dict[str, Any]:
    """MODEL (OpenAI-compatible) and CLAUDE (the Messages API), one deployment each,
    shared by two tenants; a deployment is benched at its first failure that counts,
    a 400 included (which LiteLLM counts only where a deployment's policy says so)."""
    config = claude_config(
        upstream,
        router_settings={"num_retries": 0, "allowed_fails": 0, "cooldown_time": 60},
        server={"lean_upstream": lean},
        auth={"keys": [{"key": key, "tenant": tenant} for tenant, key in KEYS.items()]},
    )
    policy = {"BadRequestErrorAllowedFails": 0, "NotFoundErrorAllowedFails": 0}
    for entry in config["model_list"]:
        entry["model_info"] = entry.get("model_info", {}) | {"allowed_fails_policy": policy}
    return config


def ask(url: str, door: str, tenant: str, **fields: Any) -> httpx.Response:
    """One turn of `tenant`'s through `door` ("chat-claude": the chat door to Claude, by
    LiteLLM's translation), with the body's extra `fields`."""
    headers = {"Authorization": f"Bearer {KEYS[tenant]}"}
    if door in ("chat", "chat-claude"):
        body = {"model": MODEL if door == "chat" else CLAUDE, "messages": USER}
        return httpx.post(url + "/v1/chat/completions", json=body | fields, headers=headers)
    body = {"model": CLAUDE, "max_tokens": 32, "messages": USER}
    return httpx.post(url + "/v1/messages", json=body | fields, headers=headers, timeout=30)


@pytest.mark.parametrize("status", [400, 404, 409, 413, 422])
@pytest.mark.parametrize("door", ["chat", "messages"])
def test_a_tenants_refused_request_benches_no_shared_deployment(
    upstream: FakeUpstream, start_proxy: Any, lean: bool, door: str, status: int
) -> None:
    """Tenant A's request that the provider refuses for what it holds (a 404 for a
    container id of its choosing, a 400, 413 or 422 for its body) says nothing of the
    deployment: tenant B's requests to the same model, right after, are all served."""
    url = start_proxy(tenants_config(upstream, lean))
    upstream.queue(Reply(status=status, error_message="no such container: MODE:e404"))
    refused = ask(url, door, "team-a", **({"container": "MODE:e404"} if door == "messages" else {}))
    # (LiteLLM's Anthropic route says a 413 as a 400.)
    assert refused.status_code in (status, 400), refused.text
    # LiteLLM's own path books a failure from a callback a moment after the answer:
    # twenty turns in a row would meet a cooldown it started.
    answers = [ask(url, door, "team-b") for _ in range(20)]
    assert [a.status_code for a in answers] == [200] * 20, answers[-1].text
    assert "resting" not in answers[-1].text


@pytest.mark.parametrize(
    "tools",
    [
        [{"type": "x", "function": {"name": "f"}}],  # a tool type LiteLLM cannot translate
        [{"type": "function", "function": {"name": "f"}}, {"type": "unknown_20250101"}],
    ],
)
def test_a_request_litellm_cannot_translate_is_a_400_and_benches_nothing(
    upstream: FakeUpstream, start_proxy: Any, tools: list[Any]
) -> None:
    """LiteLLM fails before it sends anything on a request it cannot put in the
    provider's API: the provider was never asked, so the request is the client's own
    mistake (a 400 in LiteLLM's words, no traceback) and the deployment is not benched."""
    url = start_proxy(tenants_config(upstream, lean=False))
    refused = ask(url, "chat-claude", "team-a", tools=tools)
    assert refused.status_code == 400, refused.text
    assert "cannot be put in the API of the model's provider" in refused.text
    assert "Traceback" not in refused.text and "litellm" not in refused.text.lower()
    assert upstream.messages_requests() == []
    answers = [ask(url, "chat-claude", "team-b") for _ in range(20)]
    assert [a.status_code for a in answers] == [200] * 20, answers[-1].text


@pytest.mark.parametrize("status", [429, 500])
@pytest.mark.parametrize("door", ["chat", "chat-claude"])
def test_a_deployments_own_failure_still_benches_it(
    upstream: FakeUpstream, start_proxy: Any, lean: bool, status: int, door: str
) -> None:
    """The control: a failure of the deployment's own (over its rate, broken) benches it,
    with `allowed_fails: 0`, for every tenant, on the lean path and LiteLLM's."""
    url = start_proxy(tenants_config(upstream, lean))
    upstream.queue(Reply(status=status, error_message="the deployment is down"))
    assert ask(url, door, "team-a").status_code == status

    def benched() -> bool:
        answer = ask(url, door, "team-b")
        return answer.status_code != 200 and "resting" in answer.text

    eventually(benched, "the deployment to be benched")
