"""Folds: history made into summaries. One routine folds a span into the next summary
with the stubs it freezes (`spans`), for the turn that needs a summary now and for the
one made ahead in the background when a fold is due (`ahead`); the summarizer's model
calls, its store protocol and the background jobs (`summarizer`) behind a breaker
(`breaker`); a client's own compaction kept as a chapter, and an agent's request for a
summary answered from the session's own (`chapters`).
"""

__all__ = [
    "ahead",
    "breaker",
    "chapters",
    "inline",
    "spans",
    "summarizer",
]  # its modules, each with its own `__all__`
