"""The providers: LiteLLM behind one module (`adapter`), its Router built from the
config's `model_list` (`router`), the one client a turn calls (`client`), the lean path
for OpenAI-compatible deployments (`lean`), a door's own API to a provider that speaks
it (`native`), a body sent in its `pieces`, failures in the proxy's own words
(`failures`), and what each model takes and costs (`models`, `limits`). Imports config,
conversation, observability and `proxy.errors`; nothing of the engine.
"""

__all__ = [
    "adapter",
    "client",
    "connections",
    "failures",
    "lean",
    "limits",
    "models",
    "native",
    "pieces",
    "reading",
    "router",
]  # its modules, each with its own `__all__`
