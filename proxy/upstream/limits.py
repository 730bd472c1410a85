"""Model limits: how many input tokens a model takes, and where that was learned; and
what an input token costs (LiteLLM's cost map), to price the tokens the proxy saved."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from proxy.config.settings import ModelEntry, Settings
from proxy.upstream import adapter

logger = logging.getLogger("context_proxy.upstream")


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """What a model accepts, and where we learned it (a guess is never silent)."""

    max_input_tokens: int
    max_output_tokens: int | None
    source: Literal["config", "litellm", "default"]
    input_price: float | None = None  # USD per input token; None: not known


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
    price = input_price(settings, model)
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


def input_price(settings: Settings, model: str) -> float | None:
    """USD per input token: a deployment's own `input_cost_per_token` (litellm_params or
    model_info), else LiteLLM's map. Several deployments: the cheapest, so savings are
    never overstated; one whose price is unknown leaves it unknown."""
    entries: list[ModelEntry | None] = [e for e in settings.model_list if e.model_name == model]
    prices = []
    for entry in entries or [None]:
        params = entry.litellm_params if entry else {}
        info = entry.model_info if entry else {}
        given = params.get("input_cost_per_token", info.get("input_cost_per_token"))
        provider = str(params["model"]) if entry else model
        price = float(given) if isinstance(given, int | float) else _known_price(provider)
        if price is None:
            return None
        prices.append(price)
    return min(prices)


# LiteLLM's bundled model map as shipped. `litellm.Router` writes each deployment's
# `model_info` into the global map, so after that the map answers with whatever
# some config said about a model; limits and prices are read from this copy instead.
_MAP_LIMITS: dict[str, tuple[int, int | None]] = {
    name: (int(info["max_input_tokens"]), info.get("max_output_tokens"))
    for name, info in adapter.model_cost.items()
    if isinstance(info, dict) and isinstance(info.get("max_input_tokens"), int | float)
}
_MAP_PRICES: dict[str, float] = {
    name: float(info["input_cost_per_token"])
    for name, info in adapter.model_cost.items()
    if isinstance(info, dict) and isinstance(info.get("input_cost_per_token"), int | float)
}


def _known_price(provider_model: str) -> float | None:
    for key in (provider_model, provider_model.split("/", 1)[-1]):
        if key in _MAP_PRICES:
            return _MAP_PRICES[key]
    return None


def _known_limits(provider_model: str) -> tuple[int, int | None] | None:
    """(max input, max output) for `openai/gpt-4o` or `gpt-4o` from the pristine map."""
    for key in (provider_model, provider_model.split("/", 1)[-1]):
        if key in _MAP_LIMITS:
            return _MAP_LIMITS[key]
    return None
