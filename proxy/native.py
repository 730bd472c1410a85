"""A door's own API, spoken to a provider that speaks it too (DESIGN §8).

The engine plans every turn on chat messages. For a Messages request to an Anthropic
deployment, or a Responses request to an OpenAI one, the planned window is sent in the
door's own shape through LiteLLM's route for that API, not through its chat
translation: what only that API can say (a tool result's `is_error`, cache
breakpoints, server tools, vendor fields) reaches the provider as the client said it,
and its reply reaches the client as the provider said it. The door renders and reads
that shape (`Native`); the upstream makes the call; the engine stores the chat form of
the reply, as for any other turn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol

import orjson

from proxy.errors import ProxyError

__all__ = [
    "ANTHROPIC_CONTENT",
    "NATIVE_FIELDS",
    "RESPONSES_OUTPUT",
    "Native",
    "NativeApi",
    "NativeStream",
    "sse_events",
]

NativeApi = Literal["anthropic_messages", "responses"]

# A chat message's field that keeps an assistant turn's blocks as they came, where the
# chat form cannot hold them all (a server tool's call and result, citations).
ANTHROPIC_CONTENT = "anthropic_content"
# A chat message's field that keeps a model's turn of Responses output items as they
# came, where the chat form cannot hold them all (reasoning, a hosted tool's call).
RESPONSES_OUTPUT = "responses_output"
# The fields a stored reply keeps of what only its door's own API can say.
NATIVE_FIELDS = (ANTHROPIC_CONTENT, RESPONSES_OUTPUT)


class NativeStream(Protocol):
    """One streamed native reply, read event by event: the bytes to relay and the chat
    chunks the engine stores and measures."""

    def event(self, kind: str, data: dict[str, Any], raw: bytes) -> tuple[bytes, list[dict]]: ...


class Native(Protocol):
    """A request in its door's own API, and how to read the provider's answer."""

    api: NativeApi
    # Fields of the door's API a model may not take, each with the chat parameter that
    # says whether it does (by LiteLLM's list): dropped, and said, where it does not.
    optional: tuple[tuple[str, str], ...]

    def drop(self, name: str) -> bool:
        """Leave the client's field `name` out; whether it was there."""
        ...

    def request(self, chat: dict[str, Any], summarized: bool) -> dict[str, Any]:
        """The planned chat body as this API's call arguments (`model` the model group)."""
        ...

    def completion(self, reply: dict[str, Any]) -> dict[str, Any]:
        """The provider's reply as a chat completion (what the engine stores)."""
        ...

    def stream(self) -> NativeStream: ...


async def sse_events(pieces: AsyncIterator[Any]) -> AsyncIterator[tuple[str, dict, bytes]]:
    """Server-sent events, whole, from transport pieces of bytes (an event may span
    pieces, a piece may hold several): each event's type, its data, its exact bytes."""
    buffer = b""
    async for piece in pieces:
        buffer += piece if isinstance(piece, bytes) else str(piece).encode()
        *whole, buffer = buffer.replace(b"\r\n", b"\n").split(b"\n\n")
        for raw in whole:
            parsed = _event(raw)
            if parsed is not None:
                yield parsed[0], parsed[1], raw + b"\n\n"
    parsed = _event(buffer)
    if parsed is not None:
        yield parsed[0], parsed[1], buffer + b"\n\n"


def _event(raw: bytes) -> tuple[str, dict[str, Any]] | None:
    kind, data = "", b""
    for line in raw.split(b"\n"):
        if line.startswith(b"event:"):
            kind = line[6:].strip().decode()
        elif line.startswith(b"data:"):
            data += line[5:].strip()
    if not data or data == b"[DONE]":
        return None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise ProxyError(502, "The provider sent an event that is not JSON.") from None
    if not isinstance(value, dict):
        raise ProxyError(502, "The provider sent an event that is not an object.")
    return kind or str(value.get("type") or ""), value
