"""Facts stated in a conversation: literal values a regex sees (`literals`), statements
of what a thing is (`statements`), the ledger that keeps one current value per subject
(`ledger`), and what is a credential, never to be kept or shared (`secrets`). Pure:
imports only the conversation model and redaction.
"""

__all__ = [
    "ledger",
    "literals",
    "secrets",
    "statements",
]  # its modules, each with its own `__all__`
