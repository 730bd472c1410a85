"""LiteLLM's Router, with two of its defaults made explicit for a gateway.

Retries: the Router retries twice when `router_settings` names no `num_retries`; here a
request is tried as often as the config says, once unless it says more. Cooldowns: a
deployment is benched for its own failures only (5xx, timeouts, 408, 429, no answer),
never for a 4xx the request itself caused: a rejected key (401, 403; with
`auth.mode: passthrough`, one caller's key), a 404 for an id the client chose (a
container, a file, a previous response), a 400, 413 or 422 for what the body says.
LiteLLM cools a deployment down on the first 401 or 404, even the only one of its model,
so one tenant's request could bench a deployment every tenant shares.

And which way past the Router each model's calls go: the lean path for models whose
deployments all speak the OpenAI API (`lean_models`), a door's own API for models whose
deployments all speak it (`native_models`), LiteLLM's full call otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from proxy.config.settings import ConfigError, Settings
from proxy.upstream import adapter
from proxy.upstream.lean import LEAN_PARAMS, is_openai_compatible

__all__ = [
    "ProxyRouter",
    "anthropic_models",
    "fallbacks_for",
    "lean_models",
    "lean_native_models",
    "native_models",
    "router_for",
]

# The 4xx statuses that speak of the deployment, not of the request: it timed the
# request out, or is over its rate.
_DEPLOYMENTS_OWN = frozenset({408, 429})
# Deployment settings the lean native path honours (OpenAI's organization header is
# the chat path's only).
LEAN_NATIVE_PARAMS = LEAN_PARAMS - {"organization"}


class ProxyRouter(adapter.Router):
    def deployment_callback_on_failure(self, kwargs: dict[str, Any], *args: Any) -> Any:
        """LiteLLM's failure bookkeeping (cooldowns), minus the request's own failures:
        a 4xx it caused, or a call that failed before anything was sent (LiteLLM could
        not put the request in the provider's API; its logging marks a request as it
        sends it with `api_call_start_time`, as the lean path, which translates
        nothing, does: `adapter.report_failure`)."""
        if _requests_own(kwargs.get("exception")) or "api_call_start_time" not in kwargs:
            return False
        return super().deployment_callback_on_failure(kwargs, *args)


def _requests_own(exception: Any) -> bool:
    """Whether a failure is the request's own (a 4xx but 408 and 429), not the
    deployment's: it neither counts towards nor starts a cooldown."""
    try:
        status = int(getattr(exception, "status_code", None) or 0)
    except (TypeError, ValueError):
        return False
    return 400 <= status < 500 and status not in _DEPLOYMENTS_OWN


def router_for(settings: Settings) -> ProxyRouter | None:
    """The Router of the config's `model_list` (None without one)."""
    if not settings.model_list:
        return None
    model_list = [entry.model_dump() for entry in settings.model_list]
    for index, entry in enumerate(settings.model_list):
        _check_provider(index, entry.litellm_params)
    options = {"num_retries": 0, **settings.router_settings}
    try:
        return ProxyRouter(model_list=model_list, **options)
    except TypeError as exc:
        raise ConfigError(f"router_settings: {exc}") from None
    except Exception as exc:  # LiteLLM's own words, one line, not its traceback
        raise ConfigError(f"model_list or router_settings: {_first_line(exc)}") from None


def _check_provider(index: int, params: dict[str, Any]) -> None:
    """A deployment whose provider LiteLLM cannot tell is refused at start, naming it
    (the Router would fail on it at start, or at its first request)."""
    model = str(params["model"])
    if "*" in model:
        return  # a wildcard route: its provider is named when a request fills it in
    try:
        adapter.get_llm_provider(
            model=model,
            custom_llm_provider=params.get("custom_llm_provider"),
            api_base=params.get("api_base"),
        )
    except Exception:
        raise ConfigError(
            f"model_list[{index}].litellm_params.model: LiteLLM knows no provider for"
            f" `{model}`; name one, as in `openai/{model.split('/')[-1]}`"
        ) from None


def _first_line(exc: Exception) -> str:
    text = str(getattr(exc, "message", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# The provider that speaks each door's own API, and where it speaks it by default.
_NATIVE_PROVIDERS = {"anthropic_messages": "anthropic", "responses": "openai"}
_OPENAI = "https://api.openai.com"
_OPENAI_BASE_VARIABLES = ("OPENAI_BASE_URL", "OPENAI_API_BASE")


def native_models(settings: Settings) -> dict[str, frozenset[str]]:
    """For each native API (`proxy.upstream.native`), the model names whose every deployment
    speaks it: an `anthropic/…` deployment speaks the Messages API; an `openai/…` one
    the Responses API at OpenAI's own address, elsewhere only when its `model_info` says
    `native_api: true` (an OpenAI-compatible server may not serve `/responses`).
    `native_api: false` keeps a deployment on the chat translation."""
    routes: dict[str, frozenset[str]] = {}
    for api, wanted in _NATIVE_PROVIDERS.items():
        speaks: dict[str, bool] = {}
        for entry in settings.model_list:
            ok = _speaks(entry.litellm_params, entry.model_info, wanted)
            speaks[entry.model_name] = speaks.get(entry.model_name, True) and ok
        routes[api] = frozenset(name for name, ok in speaks.items() if ok)
    return routes


def _speaks(params: dict[str, Any], info: dict[str, Any], wanted: str) -> bool:
    declared = info.get("native_api")
    if declared is False or _provider(params) != wanted:
        return False
    return declared is True or wanted == "anthropic" or _openai_base(params).startswith(_OPENAI)


def _provider(params: dict[str, Any]) -> str | None:
    """A deployment's provider, as LiteLLM names it (None: it cannot)."""
    try:
        _, provider, _, _ = adapter.get_llm_provider(
            model=str(params["model"]), api_base=params.get("api_base")
        )
    except Exception:
        return None
    return provider if isinstance(provider, str) else None


def _openai_base(params: dict[str, Any]) -> str:
    """Where LiteLLM sends an `openai/…` deployment: its `api_base`, else the address the
    environment names, else OpenAI's."""
    for value in (params.get("api_base"), *map(os.environ.get, _OPENAI_BASE_VARIABLES)):
        if value:
            return str(value)
    return _OPENAI


# Routing strategies that need nothing from LiteLLM's logging callbacks: with others
# (latency-, usage- or cost-based), every call goes through `litellm.acompletion`.
_LEAN_STRATEGIES = frozenset({"simple-shuffle"})
FALLBACK_SETTINGS = ("fallbacks", "context_window_fallbacks", "content_policy_fallbacks")


def lean_models(settings: Settings, lean: Callable[[Any], bool] | None = None) -> frozenset[str]:
    """Model names whose every deployment, and every model they fall back to, is
    OpenAI-compatible (`is_openai_compatible`), or passes `lean` (a `model_list`
    entry): those can take the lean path."""
    if settings.router_settings.get("routing_strategy", "simple-shuffle") not in _LEAN_STRATEGIES:
        return frozenset()
    return _reaching_only(
        settings, lean or (lambda entry: is_openai_compatible(entry.litellm_params))
    )


def anthropic_models(settings: Settings) -> frozenset[str]:
    """Model names whose every deployment, and every model they fall back to, is
    Anthropic's: LiteLLM's chat translation to them may be given the proxy's pool as its
    HTTP client (`proxy.upstream.connections`)."""
    return _reaching_only(settings, lambda entry: _provider(entry.litellm_params) == "anthropic")


def _reaching_only(settings: Settings, passes: Callable[[Any], bool]) -> frozenset[str]:
    """Model names whose every deployment, and every model they fall back to, `passes`
    (a `model_list` entry)."""
    router = settings.router_settings
    compatible: dict[str, bool] = {}
    for entry in settings.model_list:
        ok = passes(entry)
        compatible[entry.model_name] = compatible.get(entry.model_name, True) and ok
    edges: dict[str, set[str]] = {}
    for key in FALLBACK_SETTINGS:
        for rule in router.get(key) or []:
            for name, targets in rule.items() if isinstance(rule, dict) else ():
                edges.setdefault(name, set()).update(targets or [])
    defaults = set(router.get("default_fallbacks") or [])

    def reachable(name: str) -> set[str]:
        seen, todo = set(), [name]
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo += [*edges.get(current, ()), *defaults]
        return seen

    return frozenset(
        name
        for name in compatible
        if all(compatible.get(other, False) for other in reachable(name))
    )


def lean_native_models(settings: Settings) -> dict[str, frozenset[str]]:
    """For each native API, the models whose calls take its lean path
    (`proxy.upstream.native.NativeClient`): every deployment, and every one they fall
    back to, speaks it (`native_models`) with no setting beyond the lean path's (the
    ones it honours; others, such as default parameters or credentials by name, are
    LiteLLM's to apply)."""

    def lean(api: str) -> Callable[[Any], bool]:
        wanted = _NATIVE_PROVIDERS[api]
        return lambda entry: (
            set(entry.litellm_params) <= LEAN_NATIVE_PARAMS
            and _speaks(entry.litellm_params, entry.model_info, wanted)
        )

    return {api: lean_models(settings, lean(api)) for api in _NATIVE_PROVIDERS}


Fallbacks = dict[str, list[dict[str, list[Any]]]]


def fallbacks_for(
    router: adapter.Router | None,
    models: frozenset[str],
    served_as: Callable[[str], str | None],
) -> tuple[Fallbacks, dict[str, set[str]]]:
    """The Router's fallback lists cut to the models a key may use (a model named or
    served by its wildcard route, as `Principal.may_use`), as the Router's per-call
    arguments, and what was cut, by the model it fell back from."""
    if router is None:
        return {}, {}
    options: Fallbacks = {}
    refused: dict[str, set[str]] = {}
    for setting in FALLBACK_SETTINGS:
        rules = getattr(router, setting, None) or []
        kept = []
        for rule in rules:
            for source, targets in rule.items() if isinstance(rule, dict) else ():
                allowed = []
                for target in targets or []:
                    name = target.get("model") if isinstance(target, dict) else target
                    served = served_as(name) if isinstance(name, str) else None
                    if isinstance(name, str) and (name in models or served in models):
                        allowed.append(target)
                    else:
                        refused.setdefault(source, set()).add(str(name))
                kept.append({source: allowed})
        options[setting] = kept
    return options, refused
