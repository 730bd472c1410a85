"""The models the proxy serves: which configured name serves a requested model (itself,
an alias, or a wildcard route LiteLLM's Router matches), the provider's name for it,
what it accepts and costs, and which optional parameters it takes."""

from __future__ import annotations

import functools
from typing import Any

from proxy.config.settings import Settings
from proxy.errors import NotFound
from proxy.upstream import adapter
from proxy.upstream.limits import ModelLimits, model_limits

__all__ = ["OPENAI_OWN", "Models"]

# OpenAI's chat parameters that LiteLLM carries to no other provider: its own call keeps
# `metadata` for its logging and never sends `prompt_cache_retention`, and it lists the
# rest for few OpenAI models or none. An `openai/…` deployment takes them (`Upstream`
# sends them as the client did); no other model does.
OPENAI_OWN = frozenset(
    {"metadata", "moderation", "prompt_cache_options", "prompt_cache_retention", "verbosity"}
)
# Parameters LiteLLM lists for all of a provider's models but takes only from a model
# whose entry in its model map says so (Anthropic's fast mode): the entry's key.
_CAPABILITIES = {"speed": "supports_speed"}


class Models:
    def __init__(self, settings: Settings, router: adapter.Router | None) -> None:
        self._settings = settings
        self._router = router  # its pattern router matches the wildcard routes
        self._names = settings.model_names()
        self._known = frozenset(self._names)
        self._patterns = frozenset(name for name in self._names if "*" in name)

    def names(self) -> list[str]:
        """The configured model names, in the config's order."""
        return list(self._names)

    def listed(self) -> list[str]:
        """The names /v1/models shows: every model but the hidden aliases."""
        hidden = {e.model_name for e in self._settings.model_list if e.model_info.get("hidden")}
        return [name for name in self._names if name not in hidden]

    @functools.lru_cache(maxsize=1024)  # noqa: B019 - one Models per process, bounded
    def served_as(self, model: str) -> str | None:
        """The configured name that serves `model`: itself, or the wildcard route
        (`*`, `openai/*`) LiteLLM's Router matches it to; None for neither."""
        if model in self._known:
            return model
        route = self._route(model)
        return str(route["model_name"]) if route else None

    def serves(self, model: str) -> bool:
        """Whether `model` may be asked for: configured, or an allowed provider/name."""
        if self.served_as(model) is not None:
            return True
        return self._settings.allows_unlisted_models() and _is_provider_model(model)

    @functools.lru_cache(maxsize=1024)  # noqa: B019 - one Models per process, bounded
    def provider_model(self, model: str) -> str:
        """The provider's own name for `model` (first deployment), e.g. `openai/gpt-4o`;
        for a wildcard route, as the Router fills its `*` in."""
        for entry in self._settings.model_list:
            if entry.model_name == model:
                return str(entry.litellm_params["model"])
        route = self._route(model)
        return str(route["litellm_params"]["model"]) if route else model

    @functools.lru_cache(maxsize=1024)  # noqa: B019 - one Models per process, bounded
    def _route(self, model: str) -> dict[str, Any] | None:
        """The first deployment of the wildcard route LiteLLM's Router matches `model`
        to, its `*` filled in (looked up once per name: the Router copies deployments)."""
        if not self._patterns or self._router is None:
            return None
        return adapter.pattern_route(self._router, model)

    @functools.lru_cache(maxsize=1024)  # noqa: B019 - one Models per process, bounded
    def supports(self, model: str, parameter: str) -> bool:
        """Whether every deployment of `model` takes the chat parameter `parameter`, by
        LiteLLM's own list for its provider and model (`OPENAI_OWN`: by its provider;
        `_CAPABILITIES`: by its model map too)."""
        deployments = [
            entry.litellm_params for entry in self._settings.model_list if entry.model_name == model
        ] or [{"model": self.provider_model(model)}]
        for params in deployments:
            try:
                name, provider, _, _ = adapter.get_llm_provider(
                    model=str(params["model"]), api_base=params.get("api_base")
                )
                supported = adapter.get_supported_openai_params(name, provider) or ()
            except Exception:  # a provider LiteLLM cannot name: take nothing optional
                return False
            taken = provider == "openai" if parameter in OPENAI_OWN else parameter in supported
            capability = _CAPABILITIES.get(parameter)
            if capability is not None:
                taken = taken and adapter.model_cost.get(name, {}).get(capability) is True
            if not taken:
                return False
        return True

    @functools.lru_cache(maxsize=256)  # noqa: B019 - one Models per process, bounded
    def capable(self, model: str, capability: str) -> bool:
        """Whether every deployment of `model` has `capability` in LiteLLM's model map
        (`supports_mid_conversation_system`, say): unknown is no."""
        deployments = [
            entry.litellm_params for entry in self._settings.model_list if entry.model_name == model
        ] or [{"model": self.provider_model(model)}]
        for params in deployments:
            try:
                name, _, _, _ = adapter.get_llm_provider(
                    model=str(params["model"]), api_base=params.get("api_base")
                )
            except Exception:  # a provider LiteLLM cannot name
                return False
            if adapter.model_cost.get(name, {}).get(capability) is not True:
                return False
        return True

    @functools.lru_cache(maxsize=256)  # noqa: B019 - one Models per process, bounded
    def reasons(self, model: str) -> bool:
        """Whether `model` reasons before it answers, by LiteLLM's model map: such a model
        (gpt-5.5, Codex's) refuses any temperature but its default."""
        try:
            return bool(adapter.supports_reasoning(model=self.provider_model(model)))
        except Exception:  # a model LiteLLM's map does not know
            return False

    @functools.lru_cache(maxsize=256)  # noqa: B019 - one Models per process, bounded
    def limits(self, model: str) -> ModelLimits:
        """What `model` accepts (see `proxy.upstream.limits.model_limits`); a wildcard route's
        model, what its provider's model does."""
        if model not in self._known:
            model = self.provider_model(model)
        return model_limits(self._settings, model)

    def check(self, model: str) -> None:
        """404 for a model that is neither configured nor an allowed provider/name."""
        if self.serves(model):
            return
        raise NotFound(
            f"The model `{model}` does not exist or is not served by this proxy.",
            code="model_not_found",
            param="model",
        )


def _is_provider_model(model: str) -> bool:
    provider, _, name = model.partition("/")
    return bool(name) and adapter.is_provider(provider)
