"""Settings: one YAML file (LiteLLM's `model_list` and `router_settings`, with this
project's own sections beside them) plus `CONTEXT_PROXY_*` environment overrides; every
default is defined here. Imports nothing of ours but `proxy.errors`.
"""

__all__ = ["litellm_sections", "settings"]  # its modules, each with its own `__all__`
