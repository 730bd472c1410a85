"""`POST /v1/chat/completions`: the conversation model's own shape, relayed as it came."""
