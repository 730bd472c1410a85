"""A door's own API, spoken to a provider that speaks it too ("native" in docs/architecture.md).

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

import contextlib
from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol

import orjson

from proxy.errors import UpstreamFailure
from proxy.upstream.lean import Events, unfinished

__all__ = [
    "Native",
    "NativeApi",
    "NativeStream",
    "native_events",
    "native_json",
]

NativeApi = Literal["anthropic_messages", "responses"]


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

    def request(self, chat: dict[str, Any], summarized: bool, mid_system: bool) -> dict[str, Any]:
        """The planned chat body as this API's call arguments (`model` the model group);
        `mid_system`: whether the model takes a system message mid-conversation where
        it stands."""
        ...

    def completion(self, reply: dict[str, Any]) -> dict[str, Any]:
        """The provider's reply as a chat completion (what the engine stores)."""
        ...

    def stream(self) -> NativeStream: ...


async def _sse_events(pieces: AsyncIterator[Any]) -> AsyncIterator[tuple[str, dict, bytes]]:
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
        raise UpstreamFailure("The provider sent an event that is not JSON.") from None
    if not isinstance(value, dict):
        raise UpstreamFailure("The provider sent an event that is not an object.")
    return kind or str(value.get("type") or ""), value


def native_json(obj: Any) -> dict[str, Any]:
    """A LiteLLM object of a provider's own API as its JSON (enums as their values,
    fields it did not send left out)."""
    if hasattr(obj, "model_dump"):
        obj = obj.model_dump(mode="json", exclude_none=True)
    return {k: v for k, v in dict(obj).items() if not k.startswith("_")}


async def native_events(
    api: NativeApi, response: Any, reader: NativeStream
) -> AsyncIterator[Events]:
    """A native stream as relayed bytes and chat chunks, event by event: LiteLLM hands
    Anthropic's stream over as the provider's bytes, OpenAI's Responses stream as event
    objects (serialized here as OpenAI sends them). A stream that ends before the API's
    own end of reply (`message_stop`; `response.completed` or `response.incomplete`:
    where the reader finishes the turn) failed, as a chat stream with no finish does:
    closed early, or with what was not JSON (LiteLLM skips such data on the Responses
    route), it raises, so the door ends it with its error event and nothing is stored."""
    events = _sse_events(response) if api == "anthropic_messages" else _serialized(response)
    finished = False
    try:
        async for kind, data, raw in events:
            relayed, chunks = reader.event(kind, data, raw)
            finished = finished or any(
                choice.get("finish_reason")
                for chunk in chunks
                for choice in chunk.get("choices") or ()
            )
            yield Events(chunks, relayed, native=True)
        if not finished:
            raise unfinished()
    finally:
        close = getattr(response, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):  # must not mask the real failure
                await close()


async def _serialized(response: Any) -> AsyncIterator[tuple[str, dict[str, Any], bytes]]:
    async for item in response:
        data = native_json(item)
        kind = str(data.get("type") or "")
        yield kind, data, b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
