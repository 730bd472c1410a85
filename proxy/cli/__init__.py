"""The command line: `context-proxy serve` and the commands beside it (`sessions`, `demo`,
`hash-key`), and running the local model. The top layer: it may import everything, and
nothing imports it.
"""

__all__ = ["demo", "local", "main", "sessions"]  # its modules, each with its own `__all__`
