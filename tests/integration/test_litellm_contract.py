"""The LiteLLM the proxy is locked to still has what `proxy.upstream.adapter` relies on:
every private part of it (a Router method with a leading underscore, a module of its
internals, the frame of its stream wrapper) does what the adapter says, here, against
the loopback upstream. An upgrade that moves one fails here, not in a user's request."""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy.upstream import adapter
from proxy.upstream.router import ProxyRouter
from tests.proxies import MODEL, UPSTREAM_KEY
from tests.upstream import FakeUpstream, Reply

USER = [{"role": "user", "content": "hello"}]
UNREACHABLE = "http://127.0.0.1:9/"


def deployment(name: str, model: str, api_base: str) -> dict[str, Any]:
    params = {"model": model, "api_base": api_base, "api_key": UPSTREAM_KEY}
    return {"model_name": name, "litellm_params": params}


@pytest.fixture
def router(upstream: FakeUpstream) -> AsyncIterator[Any]:
    made = ProxyRouter(
        model_list=[
            deployment(MODEL, f"openai/{MODEL}", upstream.base_url),
            deployment("openai/*", "openai/*", upstream.base_url),
        ],
        num_retries=0,
    )
    yield made
    made.discard()


async def test_a_call_of_ours_runs_on_the_deployment_the_router_picks(router: Any) -> None:
    """`Router._ageneric_api_call_with_fallbacks`: the lean path's call gets the chosen
    deployment's settings merged into its own arguments."""
    received: dict[str, Any] = {}

    async def call(**params: Any) -> str:
        received.update(params)
        return "answered"

    result = await adapter.call_with_fallbacks(
        router, model=MODEL, original_function=call, messages=USER, openai_payload={"n": 1}
    )
    assert result == "answered"
    assert received["model"] == f"openai/{MODEL}" and received["api_key"] == UPSTREAM_KEY
    assert received["openai_payload"] == {"n": 1} and received["messages"] == USER


async def test_a_wildcard_route_is_filled_in_for_the_model_asked_for(router: Any) -> None:
    """`Router.pattern_router.route`."""
    found = adapter.pattern_route(router, "openai/gpt-4o")
    assert found is not None
    assert (found["model_name"], found["litellm_params"]["model"]) == ("openai/*", "openai/gpt-4o")
    assert adapter.pattern_route(router, "anthropic/claude-x") is None


@pytest.mark.parametrize("end", ["done", "clean"])
async def test_the_providers_own_finish_is_told_from_the_wrappers(
    router: Any, upstream: FakeUpstream, end: str
) -> None:
    """The frame of the Router's stream wrapper holds LiteLLM's own wrapper, whose
    `received_finish_reason` says whether the provider finished: a stream the provider
    closed before its finish gets a finish_reason of LiteLLM's making."""
    upstream.queue(Reply(content="one two three", stream_end=end))
    response = await router.acompletion(model=MODEL, messages=USER, stream=True)
    finishes = []
    async for chunk in response:
        if chunk.choices and chunk.choices[0].finish_reason:
            finishes.append(adapter.provider_finished(response))
    assert finishes == [end == "done"]


async def test_the_wrappers_copy_of_the_text_is_the_one_forgotten(
    router: Any, upstream: FakeUpstream
) -> None:
    """LiteLLM's own stream wrapper (found in the Router's frame) keeps the reply's text
    so far in `response_uptil_now`; forgotten after each chunk, it holds the last
    character only, and the stream goes on to its provider's finish."""
    words = [f"word{n}" for n in range(50)]
    upstream.queue(Reply(content=" ".join(words)))
    response = await router.acompletion(model=MODEL, messages=USER, stream=True)
    texts, kept, finishes = [], [], []
    async for chunk in response:
        wrapper = adapter.stream_wrapper(response)
        assert wrapper is not response and isinstance(wrapper.response_uptil_now, str)
        texts.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
        adapter.forget_streamed_text(wrapper)
        kept.append(wrapper.response_uptil_now)
        if chunk.choices and chunk.choices[0].finish_reason:
            finishes.append(adapter.provider_finished(response))
    assert "".join(texts) == " ".join(words)
    assert max(map(len, kept)) == 1 and kept[-1] == "9"
    assert finishes == [True]


def test_the_warm_up_loads_the_tokenizer_litellm_counts_claude_with() -> None:
    """LiteLLM's `token_counter` keeps the tokenizer it picks by the model's name (its
    `_select_tokenizer_helper`), and counts a failed stream's usage with it: after
    `warm_token_counter`, Claude's is found loaded; a GPT's warm-up loads nothing (it is
    tiktoken's, which the proxy loads itself)."""
    helper = adapter.litellm.utils._select_tokenizer_helper
    helper.cache_clear()
    adapter.warm_token_counter(f"openai/{MODEL}")
    assert helper.cache_info().currsize == 0
    adapter.warm_token_counter("anthropic/claude-sonnet-4-5")
    assert helper.cache_info().currsize == 1
    hits = helper.cache_info().hits
    adapter.litellm.token_counter(model="claude-sonnet-4-5", messages=USER)
    assert helper.cache_info().hits == hits + 1


async def test_a_routed_failure_benches_its_deployment(upstream: FakeUpstream) -> None:
    """The Router's failure callback, called as LiteLLM's logging calls it: a deployment
    reported failing is cooled down, and the Router picks the other."""
    made = ProxyRouter(
        model_list=[
            deployment(MODEL, f"openai/{MODEL}", UNREACHABLE),
            deployment(MODEL, f"openai/{MODEL}", upstream.base_url),
        ],
        num_retries=0,
        allowed_fails=0,
        cooldown_time=60,
    )
    try:
        broken = next(d for d in made.model_list if d["litellm_params"]["api_base"] == UNREACHABLE)
        failure = adapter.APIError(
            status_code=500, message="down", llm_provider="openai", model=MODEL
        )
        params = {"metadata": {"model_group": MODEL}, "model_info": broken["model_info"]}
        adapter.report_failure(made, failure, params, time.time(), time.time())
        picked = {
            (
                await made.async_get_available_deployment(
                    model=MODEL, messages=USER, request_kwargs={}
                )
            )["litellm_params"]["api_base"]
            for _ in range(20)
        }
        assert picked == {upstream.base_url}
    finally:
        made.discard()


def test_the_success_callbacks_take_the_arguments_the_lean_path_passes(router: Any) -> None:
    """`deployment_callback_on_success` (async) and `sync_deployment_callback_on_success`,
    and the failure callback `ProxyRouter` overrides, take (kwargs, response, start, end)."""
    for method in (
        router.deployment_callback_on_success,
        router.sync_deployment_callback_on_success,
        super(ProxyRouter, router).deployment_callback_on_failure,
    ):
        inspect.signature(method).bind({"litellm_params": {}}, None, 0.0, 1.0)
    assert inspect.iscoroutinefunction(router.deployment_callback_on_success)
    adapter.count_success(router, {"metadata": {}, "model_info": {}}, 12, 0.0, 1.0)


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (429, "Rate limit reached", "RateLimitError"),
        (400, "This model's maximum context length is 8192 tokens", "ContextWindowExceededError"),
        (401, "Incorrect API key provided", "AuthenticationError"),
        (503, "overloaded", "ServiceUnavailableError"),
    ],
)
def test_a_providers_error_is_mapped_as_litellms_openai_handler_maps_it(
    status: int, message: str, kind: str
) -> None:
    """LiteLLM's `exception_type` and its OpenAI handler's `OpenAIError`."""
    mapped = adapter.map_openai_error(MODEL, adapter.openai_error(status, message))
    assert type(mapped).__name__ == kind
    assert isinstance(mapped, adapter.EXCEPTION_TYPES) and mapped.status_code == status


@pytest.mark.parametrize("shape", [b"[]", b"null", b'{"choices": 5}', b'{"id": "x"}'])
async def test_a_reply_its_openai_route_refuses_is_told_by_its_words(
    router: Any, upstream: FakeUpstream, shape: bytes
) -> None:
    """LiteLLM's OpenAI route says, as a 500 of its own, that it would not take a
    provider's 200 of the wrong shape as a reply: `refused_reply` knows its words, and
    not those of a provider's own 500."""
    upstream.queue(Reply(raw=shape))
    with pytest.raises(Exception) as refused:
        await router.acompletion(model=MODEL, messages=USER)
    assert adapter.refused_reply(str(refused.value)), str(refused.value)
    upstream.queue(Reply(status=500, error_message="the server had an error"))
    with pytest.raises(Exception) as failed:
        await router.acompletion(model=MODEL, messages=USER)
    assert not adapter.refused_reply(str(failed.value)), str(failed.value)


@pytest.mark.parametrize(
    ("model", "plain"), [("gpt-4o-mini", True), ("my-own-model", True), ("o3", False)]
)
def test_which_openai_models_liteLLM_leaves_as_they_are(model: str, plain: bool) -> None:
    """LiteLLM's OpenAI chat configs: the plain ones send a request as it is."""
    assert adapter.leaves_openai_requests_alone(model) is plain


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (429, "Number of request tokens has exceeded your per-minute rate limit", "RateLimitError"),
        (400, "prompt is too long: 210000 tokens > 200000 maximum", "ContextWindowExceededError"),
        (401, "invalid x-api-key", "AuthenticationError"),
    ],
)
def test_an_anthropic_error_is_mapped_as_litellms_anthropic_handler_maps_it(
    status: int, message: str, kind: str
) -> None:
    """`exception_type` for the `anthropic` provider, on the lean Messages call."""
    mapped = adapter.map_openai_error(
        "claude-sonnet-4-5", adapter.openai_error(status, message), "anthropic"
    )
    assert type(mapped).__name__ == kind
    assert isinstance(mapped, adapter.EXCEPTION_TYPES) and mapped.status_code == status


def test_the_messages_call_is_litellms_own() -> None:
    """LiteLLM's Messages config, on parameters alone: the URL, the key and version
    headers, the beta headers a feature needs, the parameters it carries (not the
    Messages API's `service_tier`), and thinking fitted to the model."""
    params = {
        "max_tokens": 8000,
        "system": "hi",
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015"}]},
        "service_tier": "auto",
        "stream": True,
    }
    url, headers, body = adapter.anthropic_messages_call(
        "claude-sonnet-4-5", params, UPSTREAM_KEY, "http://127.0.0.1:9"
    )
    assert url == "http://127.0.0.1:9/v1/messages"
    assert headers["x-api-key"] == UPSTREAM_KEY and headers["anthropic-version"]
    assert "context-management-2025-06-27" in headers["anthropic-beta"]
    assert body["thinking"]["type"] == "enabled"  # Sonnet 4.5 has no adaptive thinking
    assert "output_config" not in body and "service_tier" not in body
    assert "messages" not in body and body["stream"] is True and body["system"] == "hi"


def test_the_responses_call_is_litellms_own() -> None:
    """LiteLLM's Responses config, on parameters alone: the URL, the bearer key, the
    tool schema it repairs (a schema sent as a JSON string)."""
    tools = [{"type": "function", "name": "f", "parameters": '{"type": "object"}'}]
    url, headers, body = adapter.responses_call(
        "gpt-4.1", {"instructions": "hi", "tools": tools}, UPSTREAM_KEY, "http://127.0.0.1:9/v1"
    )
    assert url == "http://127.0.0.1:9/v1/responses"
    assert headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert body["tools"][0]["parameters"] == {"type": "object"} and "input" not in body


def test_the_encrypted_reasoning_prefix_is_what_litellm_strips() -> None:
    from litellm.litellm_core_utils.prompt_templates.common_utils import (
        is_encrypted_reasoning_block,
    )

    signature = adapter.encrypted_reasoning_prefix().decode() + "abc"
    assert is_encrypted_reasoning_block(
        {"type": "thinking", "thinking": "", "signature": signature}
    )
