"""Recall: the messages a summary covers stay searchable (a BM25 index built fold by
fold), and the ones most relevant to the latest turns come back verbatim. Pure: imports
facts, summary and the conversation model.
"""

__all__ = ["index", "meaning"]  # its modules, each with its own `__all__`
