"""Which models take the lean path: OpenAI-compatible deployments only, never a provider
that needs LiteLLM's translation, and never where the Router needs LiteLLM's logging. And
which models LiteLLM's chat translation may send on the proxy's pool as its HTTP client:
Anthropic's only, fallbacks included (another provider's route would fail on it)."""

from __future__ import annotations

from typing import Any

from proxy.config.settings import Settings
from proxy.upstream.router import anthropic_models, lean_models


def entry(name: str, model: str, **params: Any) -> dict[str, Any]:
    base = {"model": model, "api_base": "http://127.0.0.1:9/v1", "api_key": "k"}
    return {"model_name": name, "litellm_params": base | params}


def lean(*entries: dict[str, Any], **router: Any) -> frozenset[str]:
    settings = Settings.model_validate({"model_list": list(entries), "router_settings": router})
    return lean_models(settings)


def test_openai_compatible_deployments_are_lean() -> None:
    assert lean(entry("a", "openai/gpt-4o-mini"), entry("local", "openai/smollm2")) == {
        "a",
        "local",
    }


def test_providers_that_need_translation_are_not() -> None:
    entries = [
        entry("claude", "anthropic/claude-3-5-haiku-latest"),
        entry("azure", "azure/gpt-4o", api_version="2024-06-01"),
        entry("gemini", "gemini/gemini-1.5-flash"),
        entry("o3", "openai/o3-mini"),  # LiteLLM rewrites o-series parameters
        entry("gpt5", "openai/gpt-5"),
    ]
    assert lean(*entries) == frozenset()


def test_deployment_settings_the_lean_call_would_ignore_keep_litellm() -> None:
    assert lean(entry("warm", "openai/gpt-4o", temperature=0.2)) == frozenset()
    assert lean(entry("named", "openai/gpt-4o", litellm_credential_name="x")) == frozenset()
    assert lean(entry("ok", "openai/gpt-4o", rpm=10, timeout=5, organization="o")) == {"ok"}


def test_a_group_is_lean_only_if_every_deployment_is() -> None:
    mixed = [entry("pool", "openai/gpt-4o"), entry("pool", "anthropic/claude-3-5-haiku-latest")]
    assert lean(*mixed) == frozenset()


def test_fallbacks_to_a_translated_provider_keep_litellm() -> None:
    entries = [
        entry("a", "openai/gpt-4o"),
        entry("b", "openai/gpt-4o-mini"),
        entry("c", "anthropic/claude-3-5-haiku-latest"),
    ]
    assert lean(*entries, fallbacks=[{"a": ["b"]}]) == {"a", "b"}
    assert lean(*entries, fallbacks=[{"a": ["b"]}, {"b": ["c"]}]) == frozenset()
    assert lean(*entries, context_window_fallbacks=[{"a": ["c"]}]) == {"b"}
    assert lean(*entries, default_fallbacks=["c"]) == frozenset()


def test_routing_strategies_that_need_litellm_logging_keep_litellm() -> None:
    assert lean(entry("a", "openai/gpt-4o"), routing_strategy="simple-shuffle") == {"a"}
    assert lean(entry("a", "openai/gpt-4o"), routing_strategy="latency-based-routing") == set()


def test_only_models_that_reach_anthropic_alone_take_the_pool_as_litellms_client() -> None:
    entries = [
        entry("claude", "anthropic/claude-3-5-haiku-latest"),
        entry("sonnet", "anthropic/claude-sonnet-4-5"),
        entry("gpt", "openai/gpt-4o"),
        entry("pool", "anthropic/claude-sonnet-4-5"),
        entry("pool", "gemini/gemini-1.5-flash"),
    ]
    settings = Settings.model_validate({"model_list": entries})
    assert anthropic_models(settings) == {"claude", "sonnet"}
    fallbacks = [{"claude": ["sonnet"]}, {"sonnet": ["gpt"]}]
    settings = Settings.model_validate(
        {"model_list": entries, "router_settings": {"fallbacks": fallbacks}}
    )
    assert anthropic_models(settings) == frozenset()
