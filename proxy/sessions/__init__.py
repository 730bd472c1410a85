"""Stored conversations: the records (`records`: messages, summary checkpoints, the
small meta record every request reads, a session's inserts), the store protocol
(`store`), turn locks (`locks`), and the stores themselves (`stores/`: SQLite on disk,
Redis). Imports the conversation model, facts and summary (what a checkpoint holds),
observability and config.
"""

__all__ = ["locks", "records", "store", "stores"]  # its modules, each with its own `__all__`
