"""context-proxy: an OpenAI-compatible proxy that manages conversation context.

The picture of the whole is docs/architecture.md.
"""

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "cli",
    "concurrency",
    "config",
    "conversation",
    "costs",
    "doors",
    "engine",
    "errors",
    "facts",
    "http",
    "memory",
    "observability",
    "recall",
    "sessions",
    "summary",
    "upstream",
]  # its packages and modules
