"""What replaces evicted history: the fold that asks a model for a summary of a span
(`fold`, reaching the model only through a callable) and the summary as the model reads
it (`message`). Pure: imports facts and the conversation model.
"""

__all__ = ["fold", "message"]  # its modules, each with its own `__all__`
