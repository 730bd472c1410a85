"""The one conversation model every door translates into: OpenAI chat messages and
their parameters. Owns message identity (canonical form, hashes, the hash chain), token
counting, validation of message shapes, and the reply as a message to store. Pure: it
imports nothing of ours but `proxy.errors`, and no framework.
"""

__all__ = [
    "identity",
    "needles",
    "replies",
    "tokens",
    "validation",
]  # its modules, each with its own `__all__`
