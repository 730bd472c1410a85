"""Folds: history made into summaries, now for the turn that needs one or ahead in the
background, and a client's own compaction kept as a chapter."""

__all__ = [
    "ahead",
    "breaker",
    "chapters",
    "inline",
    "spans",
    "summarizer",
]  # its modules, each with its own `__all__`
