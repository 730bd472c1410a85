"""LiteLLM's Router, with two of its defaults made explicit for a gateway.

Retries: the Router retries twice when `router_settings` names no `num_retries`; here a
request is tried as often as the config says, once unless it says more. Cooldowns: a
rejected key (401, 403) says nothing of a deployment's health, only of the key (with
`auth.mode: passthrough`, of one caller's key), so it benches no deployment; LiteLLM
cools a deployment down on the first 401, even the only one of its model.
"""

from __future__ import annotations

from typing import Any

from litellm import Router

from proxy.config import ConfigError, Settings

__all__ = ["ProxyRouter", "router_for"]

_KEY_REJECTED = frozenset({401, 403})


class ProxyRouter(Router):
    def deployment_callback_on_failure(self, kwargs: dict[str, Any], *args: Any) -> Any:
        """LiteLLM's failure bookkeeping (cooldowns), minus rejected keys."""
        if _key_rejected(kwargs):
            return False
        return super().deployment_callback_on_failure(kwargs, *args)


def router_for(settings: Settings) -> ProxyRouter | None:
    """The Router of the config's `model_list` (None without one)."""
    if not settings.model_list:
        return None
    model_list = [entry.model_dump() for entry in settings.model_list]
    options = {"num_retries": 0, **settings.router_settings}
    try:
        return ProxyRouter(model_list=model_list, **options)
    except TypeError as exc:
        raise ConfigError(f"router_settings: {exc}") from None


def _key_rejected(kwargs: dict[str, Any]) -> bool:
    return getattr(kwargs.get("exception"), "status_code", None) in _KEY_REJECTED
