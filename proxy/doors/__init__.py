"""The API shapes the proxy serves, one package each: `chat` (Chat Completions),
`anthropic` (Messages), `responses` (Responses). A door parses and validates its body,
translates it to and from the conversation model, renders its own API to a provider that
speaks it (native), frames its SSE and shapes its errors. A door knows its wire format
and nothing about budgets; it may import the engine's types, the conversation model,
the upstream's native contract and the session store's protocol.
"""
