"""LiteLLM's own config sections: honoured where context-proxy has the feature, refused
at start, in one line, where it has not. An existing LiteLLM config either works as it
says or says why not; nothing in it is silently ignored.

Honoured: `general_settings.master_key` (an admin key), `litellm_settings`' retries and
fallbacks (the Router's, as if under `router_settings`), `request_timeout`,
`drop_params`, `set_verbose` and `json_logs`, `router_settings.model_group_alias` (each
alias serves its model's deployments) and `environment_variables` (set at start, unless
already set). Wildcard model names (`*`, `openai/*`) are LiteLLM's Router's own.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["translate"]

# litellm_settings keys that are the Router's: moved to router_settings.
ROUTER_KEYS = frozenset(
    {
        "num_retries",
        "fallbacks",
        "context_window_fallbacks",
        "content_policy_fallbacks",
        "default_fallbacks",
        "allowed_fails",
        "cooldown_time",
        "retry_after",
        "model_group_alias",
    }
)
# litellm_settings keys that are ours under another name: (section, key, value map).
_OURS = {
    "request_timeout": ("server", "request_timeout_seconds", None),
    "drop_params": ("server", "drop_params", None),
    "set_verbose": ("server", "log_level", {True: "debug"}),
    "json_logs": ("server", "log_format", {True: "json"}),
}
_METRICS = "context-proxy exports its own Prometheus metrics (/metrics) and a log line per request"
_HINTS = {
    "callbacks": _METRICS,
    "success_callback": _METRICS,
    "failure_callback": _METRICS,
    "service_callback": _METRICS,
    "cache": "context-proxy does not cache replies",
    "cache_params": "context-proxy does not cache replies",
    "max_budget": "context-proxy keeps no budgets; use auth.keys[].rpm to limit a key",
    "otel": _METRICS,
    "database_url": "context-proxy keeps keys in its config (auth.keys)",
    "store_model_in_db": "context-proxy reads models from model_list only",
}


def translate(raw: dict[str, Any], environ: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """`raw` with LiteLLM's sections turned into context-proxy settings, and the one-line
    reasons for each key that cannot be (empty: the config is usable). `environ` gains
    the config's `environment_variables` that it does not already have."""
    raw = copy.deepcopy(raw)
    refused: list[str] = []
    litellm = _mapping(raw.pop("litellm_settings", None), "litellm_settings", refused)
    general = _mapping(raw.pop("general_settings", None), "general_settings", refused)
    variables = _mapping(raw.pop("environment_variables", None), "environment_variables", refused)
    for name, value in variables.items():
        if value is not None and str(name) not in environ:
            environ[str(name)] = str(value)
    router = raw.setdefault("router_settings", {})
    if not isinstance(router, dict):
        return raw, ["router_settings: must be a mapping"]
    for key, value in litellm.items():
        if key in ROUTER_KEYS:
            if key in router and router[key] != value:
                refused.append(f"litellm_settings.{key} and router_settings.{key} differ: keep one")
            router.setdefault(key, value)
        elif key in _OURS:
            section, ours, values = _OURS[key]
            value = values.get(value) if values is not None else value
            if value is not None:
                target = raw.setdefault(section, {})
                if isinstance(target, dict):
                    target.setdefault(ours, value)
        elif key == "telemetry" and value is False:
            pass  # context-proxy sends no telemetry anywhere
        else:
            refused.append(_refusal("litellm_settings", key))
    for key, value in general.items():
        if key == "master_key" and isinstance(value, str) and value:
            auth = raw.setdefault("auth", {})
            if isinstance(auth, dict):
                auth.setdefault("admin_keys", []).append({"key": value})
        else:
            refused.append(_refusal("general_settings", key))
    aliases = router.pop("model_group_alias", None)
    if aliases is not None:
        refused += _expand_aliases(raw, aliases)
    return raw, refused


def _mapping(value: Any, name: str, refused: list[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        refused.append(f"{name}: must be a mapping")
        return {}
    return value


def _refusal(section: str, key: str) -> str:
    why = _HINTS.get(key, "a LiteLLM proxy feature context-proxy does not have")
    return f"{section}.{key}: not supported ({why}); remove it"


def _expand_aliases(raw: dict[str, Any], aliases: Any) -> list[str]:
    """Each alias becomes a model of its own serving its target's deployments (LiteLLM's
    `model_group_alias`); `hidden: true` keeps it out of /v1/models."""
    if not isinstance(aliases, dict):
        return ["router_settings.model_group_alias: must map alias names to model names"]
    entries = raw.get("model_list") or []
    if not isinstance(entries, list):
        return []
    names = {e.get("model_name") for e in entries if isinstance(e, dict)}
    refused = []
    for alias, target in aliases.items():
        hidden = False
        if isinstance(target, dict):
            hidden = bool(target.get("hidden", False))
            target = target.get("model")
        if alias in names:
            refused.append(f"router_settings.model_group_alias.{alias}: already a model name")
            continue
        served = [e for e in entries if isinstance(e, dict) and e.get("model_name") == target]
        if not served:
            refused.append(
                f"router_settings.model_group_alias.{alias}: `{target}` is not in model_list"
            )
            continue
        for entry in served:
            info = {**(entry.get("model_info") or {}), "alias_of": target, "hidden": hidden}
            info.pop("id", None)  # a deployment id names one deployment only
            entries.append({**copy.deepcopy(entry), "model_name": alias, "model_info": info})
    return refused
