"""`POST /v1/chat/completions`: the conversation model's own shape, relayed as it came."""

from __future__ import annotations

import functools
from typing import Any

import orjson
from starlette.responses import Response

from proxy.concurrency import elsewhere, many
from proxy.conversation.validation import validate_parameters
from proxy.doors.base import Api, ErrorReply, Inbound, ORJSONResponse
from proxy.doors.translations import Written
from proxy.engine import Turn
from proxy.upstream.client import PROVIDER_HINTS
from proxy.upstream.lean import Completion

__all__ = ["ChatDoor"]

# OpenAI's hints, which not every model takes: sent to one that does, else dropped and said.
OPTIONAL = tuple((name,) for name in PROVIDER_HINTS)


class ChatDoor:
    api: Api = "chat"
    unsent_headers: tuple[str, ...] = ()

    async def inbound(
        self, body: dict[str, Any], tenant: str, written: Written | None = None
    ) -> Inbound:
        tools = many(body.get("tools"), body.get("functions"))  # checked in a worker thread
        await elsewhere(tools, functools.partial(validate_parameters, body))
        dropped: tuple[str, ...] = ()
        extra: dict[str, Any] = {}
        if "stream_options" in body and body.get("stream") is not True:
            del body["stream_options"]  # a stream's only: LiteLLM leaves it out, OpenAI refuses it
            dropped = ("stream_options",)
        elif body.get("stream") is True:
            # A stream's usage comes only when asked for: the proxy always asks (each
            # turn's usage is recorded and priced) and keeps it from a client that did not.
            options = body.get("stream_options")
            options = options if isinstance(options, dict) else {}
            if options.get("include_usage") is not True:
                body["stream_options"] = options | {"include_usage": True}
                extra["hide_usage"] = True
        return Inbound(body, dropped=dropped, optional=OPTIONAL, extra=extra)

    def reply(
        self, completion: Completion, inbound: Inbound, turn: Turn, headers: dict[str, str]
    ) -> Response:
        if completion.raw is not None:  # the provider's own bytes, relayed as they came
            return Response(completion.raw, media_type="application/json", headers=headers)
        return ORJSONResponse(completion.data, headers=headers)

    def framer(self, inbound: Inbound, turn: Turn) -> ChatFramer:
        return ChatFramer(hide_usage=inbound.extra.get("hide_usage", False))


class ChatFramer:
    """OpenAI's SSE: the chunks as they came, then `[DONE]` (never after a failure, so a
    client can tell a cut-off reply from a finished one). For a client that did not ask
    for the stream's usage (`stream_options.include_usage`), the usage the proxy asked
    for is left out."""

    def __init__(self, hide_usage: bool = False) -> None:
        self._hide_usage = hide_usage

    def chunks(self, chunks: list[dict[str, Any]], raw: bytes | None) -> bytes:
        if self._hide_usage and any(chunk.get("usage") for chunk in chunks):
            chunks = [_unused(chunk) for chunk in chunks if chunk.get("choices")]
            raw = None
        return raw or b"".join(b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks)

    def relay(self, raw: bytes) -> bytes:
        return raw  # chat is no door's own API beside the chat translation

    def end(self) -> list[bytes]:
        return [b"data: [DONE]\n\n"]

    def error(self, error: ErrorReply) -> bytes:
        return b"data: " + orjson.dumps(error.body()) + b"\n\n"


def _unused(chunk: dict[str, Any]) -> dict[str, Any]:
    """A chunk without the usage its client did not ask for."""
    return {key: value for key, value in chunk.items() if key != "usage"}
