"""Model limits: how many input tokens a model takes, and where that was learned; and
what its tokens cost and how its prompt cache works (LiteLLM's cost map, a deployment's
own prices winning), to put a turn's usage and its counterfactual in dollars."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from proxy.config.settings import ModelEntry, Settings
from proxy.costs.prices import Prices, cache_style
from proxy.upstream import adapter

__all__ = ["ModelLimits", "model_limits", "model_prices"]

logger = logging.getLogger("context_proxy.upstream")


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """What a model accepts, and where we learned it (a guess is never silent)."""

    max_input_tokens: int
    max_output_tokens: int | None
    source: Literal["config", "litellm", "default"]
    prices: Prices | None = None  # None: not known


def model_limits(settings: Settings, model: str) -> ModelLimits:
    """Input limit from the config's model_info, else LiteLLM's model map, else the
    configured default (logged, so a guessed budget is never silent). A name with
    several deployments gets the smallest limit: any of them may serve it."""
    entries: list[ModelEntry | None] = [e for e in settings.model_list if e.model_name == model]
    found: list[tuple[int, int | None, Literal["config", "litellm"]]] = []
    for entry in entries or [None]:
        provider = str(entry.litellm_params["model"]) if entry else model
        info = entry.model_info if entry else {}
        known = _known_limits(provider)
        output = info.get("max_output_tokens") or (known[1] if known else None)
        if info.get("max_input_tokens"):
            found.append((int(info["max_input_tokens"]), output, "config"))
        elif known is not None:
            found.append((known[0], output, "litellm"))
    price = model_prices(settings, model)
    if found and len(found) == len(entries or [None]):
        max_input, max_output, source = min(found, key=lambda limit: limit[0])
        return ModelLimits(max_input, int(max_output) if max_output else None, source, price)
    default = settings.context.default_context_window
    logger.warning(
        "no input limit known for model %r; using context.default_context_window=%d",
        model,
        default,
    )
    return ModelLimits(default, None, "default", price)


def model_prices(settings: Settings, model: str) -> Prices | None:
    """What `model`'s tokens cost: a deployment's own prices (litellm_params or
    model_info: `input_cost_per_token`, `output_cost_per_token`,
    `cache_read_input_token_cost`, `cache_creation_input_token_cost`) win over LiteLLM's
    map; a cache price neither gives is the input price. The cache's TTL is
    `model_info.cache_ttl_seconds`, else `context.cache_ttl_seconds`. Several
    deployments: the cheapest, so savings are never overstated; one whose input or
    output price is unknown leaves the model unpriced."""
    entries: list[ModelEntry | None] = [e for e in settings.model_list if e.model_name == model]
    found: list[Prices] = []
    for entry in entries or [None]:
        params = entry.litellm_params if entry else {}
        info = entry.model_info if entry else {}
        provider = str(params["model"]) if entry else model
        price = {**_known_prices(provider), **_given_prices(info), **_given_prices(params)}
        given_input = price.get("input_cost_per_token")
        output = price.get("output_cost_per_token")
        if given_input is None or output is None:
            return None
        read = price.get("cache_read_input_token_cost")
        write = price.get("cache_creation_input_token_cost")
        ttl = info.get("cache_ttl_seconds", settings.context.cache_ttl_seconds)
        found.append(
            Prices(
                input=given_input,
                output=output,
                cache_read=given_input if read is None else read,
                cache_write=given_input if write is None else write,
                cache=cache_style(provider),
                ttl_seconds=float(ttl),
            )
        )
    return min(found, key=lambda prices: (prices.input, prices.output))


# LiteLLM's bundled model map as shipped. `litellm.Router` writes each deployment's
# `model_info` into the global map, so after that the map answers with whatever
# some config said about a model; limits and prices are read from this copy instead.
_MAP_LIMITS: dict[str, tuple[int, int | None]] = {
    name: (int(info["max_input_tokens"]), info.get("max_output_tokens"))
    for name, info in adapter.model_cost.items()
    if isinstance(info, dict) and isinstance(info.get("max_input_tokens"), int | float)
}
_PRICE_FIELDS = (
    "input_cost_per_token",
    "output_cost_per_token",
    "cache_read_input_token_cost",
    "cache_creation_input_token_cost",
)
_MAP_PRICES: dict[str, dict[str, float]] = {
    name: {
        field: float(info[field])
        for field in _PRICE_FIELDS
        if isinstance(info.get(field), int | float)
    }
    for name, info in adapter.model_cost.items()
    if isinstance(info, dict) and isinstance(info.get("input_cost_per_token"), int | float)
}


def _given_prices(section: dict[str, object]) -> dict[str, float]:
    """The prices a deployment's section gives itself."""
    return {
        field: float(value)
        for field in _PRICE_FIELDS
        if isinstance(value := section.get(field), int | float) and not isinstance(value, bool)
    }


def _known_prices(provider_model: str) -> dict[str, float]:
    """The prices LiteLLM's pristine map gives `openai/gpt-4o` or `gpt-4o` ({}: none)."""
    for key in (provider_model, provider_model.split("/", 1)[-1]):
        if key in _MAP_PRICES:
            return _MAP_PRICES[key]
    return {}


def _known_limits(provider_model: str) -> tuple[int, int | None] | None:
    """(max input, max output) for `openai/gpt-4o` or `gpt-4o` from the pristine map."""
    for key in (provider_model, provider_model.split("/", 1)[-1]):
        if key in _MAP_LIMITS:
            return _MAP_LIMITS[key]
    return None
