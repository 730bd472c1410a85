"""Where a model's input limit comes from: config, LiteLLM's map, or a logged default."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from proxy.config.settings import Settings
from proxy.costs import Prices
from proxy.upstream.client import Upstream
from proxy.upstream.limits import model_prices

_OPEN: list[Upstream] = []


@pytest.fixture(autouse=True)
def _close_upstreams() -> Iterator[None]:
    """Each Router hooks into LiteLLM's global callback lists: unhook them after a test."""
    yield
    while _OPEN:
        asyncio.run(_OPEN.pop().close())


def upstream_for(*entries: dict) -> Upstream:
    _OPEN.append(Upstream(Settings.model_validate({"model_list": list(entries)})))
    return _OPEN[-1]


def entry(name: str, model: str, **model_info: float) -> dict:
    return {
        "model_name": name,
        "litellm_params": {"model": model, "api_base": "http://127.0.0.1:9/", "api_key": "k"},
        "model_info": model_info,
    }


def test_config_model_info_wins() -> None:
    limits = upstream_for(entry("small", "openai/gpt-4o", max_input_tokens=4096)).models.limits(
        "small"
    )
    assert (limits.max_input_tokens, limits.source) == (4096, "config")


def test_litellm_model_map_is_the_fallback() -> None:
    limits = upstream_for(entry("big", "openai/gpt-4o")).models.limits("big")
    assert (limits.max_input_tokens, limits.source) == (128000, "litellm")


def test_claude_windows_come_from_the_model_map() -> None:
    """Claude Code's models have 200k-token windows: an agent's 35k-token system prompt
    and tools then leave room for the conversation, with no `model_info` needed."""
    for model in (
        "anthropic/claude-sonnet-4-5",
        "anthropic/claude-sonnet-4-5-20250929",
        "anthropic/claude-opus-4-1",
        "anthropic/claude-haiku-4-5",
    ):
        limits = upstream_for(entry("claude", model)).models.limits("claude")
        assert (limits.max_input_tokens, limits.source) == (200_000, "litellm"), model


def test_unknown_model_uses_the_default_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    upstream = upstream_for(entry("mystery", "openai/not-a-known-model"))
    with caplog.at_level(logging.WARNING):
        limits = upstream.models.limits("mystery")
    assert (limits.max_input_tokens, limits.source) == (8192, "default")
    assert "default_context_window" in caplog.text


def test_provider_model_names_the_deployment() -> None:
    upstream = upstream_for(entry("alias", "anthropic/claude-3-5-haiku-latest"))
    assert upstream.models.provider_model("alias") == "anthropic/claude-3-5-haiku-latest"
    assert upstream.models.provider_model("openai/gpt-4o") == "openai/gpt-4o"


def test_aliases_of_one_model_keep_their_own_limits() -> None:
    """LiteLLM's Router writes model_info into its global map; one alias's small
    window must not shrink another alias (or a later config) of the same model."""
    upstream = upstream_for(
        entry("tight", "openai/gpt-4o", max_input_tokens=2048),
        entry("roomy", "openai/gpt-4o"),
    )
    assert upstream.models.limits("tight").max_input_tokens == 2048
    assert upstream.models.limits("roomy").max_input_tokens == 128000
    assert (
        upstream_for(entry("later", "openai/gpt-4o")).models.limits("later").max_input_tokens
        == 128000
    )


def test_several_deployments_get_the_smallest_limit() -> None:
    upstream = upstream_for(
        entry("pool", "openai/gpt-4o", max_input_tokens=30000),
        entry("pool", "openai/gpt-4o-mini", max_input_tokens=20000),
    )
    assert upstream.models.limits("pool").max_input_tokens == 20000


def test_prices_come_from_the_cost_map_with_each_providers_cache() -> None:
    """LiteLLM's map: Claude Sonnet 4.5 at $3/$15 per million, a cache read $0.30 and a
    write $3.75 (1.25x, 5 minutes), at breakpoints; GPT-4.1 at $2/$8, a read $0.50 and no
    write price (a write costs the input price), cached automatically."""
    settings = Settings.model_validate(
        {
            "model_list": [
                entry("claude", "anthropic/claude-sonnet-4-5"),
                entry("gpt", "openai/gpt-4.1"),
            ],
            "context": {"cache_ttl_seconds": 600},
        }
    )
    claude, gpt = model_prices(settings, "claude"), model_prices(settings, "gpt")
    assert claude == Prices(3e-06, 1.5e-05, 3e-07, 3.75e-06, "breakpoints", 600.0)
    assert gpt == Prices(2e-06, 8e-06, 5e-07, 2e-06, "automatic", 600.0)


def test_a_deployments_own_prices_win_and_several_deployments_give_the_cheapest() -> None:
    own = entry("m", "openai/gpt-4.1", cache_ttl_seconds=3600)
    own["litellm_params"] |= {"input_cost_per_token": 1e-06, "output_cost_per_token": 4e-06}
    dear = entry("m", "openai/gpt-4.1")
    settings = Settings.model_validate({"model_list": [dear, own]})
    # The map's cache read price stays: the deployment named none of its own.
    assert model_prices(settings, "m") == Prices(1e-06, 4e-06, 5e-07, 1e-06, "automatic", 3600.0)


def test_a_model_with_no_known_price_is_unpriced() -> None:
    settings = Settings.model_validate({"model_list": [entry("local", "openai/my-own-model")]})
    assert model_prices(settings, "local") is None
    limits = upstream_for(entry("local", "openai/my-own-model")).models.limits("local")
    assert limits.prices is None
