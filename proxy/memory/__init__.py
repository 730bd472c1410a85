"""Memory across sessions: the facts of every session that shares a memory id, kept as
one memory with confidence, source and time, and the few most relevant to a
conversation ranked for injection. Pure: imports facts, recall, summary and the
conversation model.
"""

__all__ = ["facts"]  # its modules, each with its own `__all__`
