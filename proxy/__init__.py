"""context-proxy: an OpenAI-compatible proxy that manages conversation context.

The picture of the whole is docs/architecture.md.
"""

__version__ = "0.1.0"
