"""Facts stated in a conversation: literal values a regex sees (`literals`), statements
of what a thing is (`statements`), and the ledger that keeps one current value per
subject (`ledger`). Pure: imports only the conversation model and redaction.
"""
