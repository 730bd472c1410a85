"""The API shapes the proxy serves, one package each: `chat` (Chat Completions),
`anthropic` (Messages), `responses` (Responses). A door parses and validates its body,
translates it to and from the conversation model, renders its own API to a provider that
speaks it (native), frames its SSE and shapes its errors. A door knows its wire format
and nothing about budgets; it may import the engine's types, the conversation model,
the upstream's native contract and the session store's protocol.

The Messages and Responses doors have one shape: `door` (the door, delegating),
`request`, `response`, `stream` and `native` (with `render` and `events`); Chat
Completions, relayed as they came, need only their `door`. Beside them, `base` says what every
door is (`Door`, `Inbound`, `Framer`, `ErrorReply`), `parameters` which of a request's
parameters reach the provider, and `translations` what a door keeps of a conversation
between its requests.
"""

__all__ = [
    "anthropic",
    "base",
    "chat",
    "parameters",
    "responses",
    "translations",
]  # its modules, each with its own `__all__`
