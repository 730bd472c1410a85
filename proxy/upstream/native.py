"""A door's own API, spoken to a provider that speaks it too ("native" in docs/architecture.md).

The engine plans every turn on chat messages. For a Messages request to an Anthropic
deployment, or a Responses request to an OpenAI one, the planned window is sent in the
door's own shape through LiteLLM's route for that API, not through its chat
translation: what only that API can say (a tool result's `is_error`, cache
breakpoints, server tools, vendor fields) reaches the provider as the client said it,
and its reply reaches the client as the provider said it. The door renders and reads
that shape (`Native`); the upstream makes the call; the engine stores the chat form of
the reply, as for any other turn.

The call itself takes the lean path where a deployment allows it (`NativeClient`), as
chat completions do (`proxy.upstream.lean`): the Router still picks the deployment,
retries and falls back; LiteLLM still says what its route would do to the request's
parameters (key and version headers, beta headers, thinking and effort for the model);
and the proxy posts the window as bytes, rather than LiteLLM walking every message of
it (four sanitizing passes and a log copy on the Messages route) and serializing it
again. A request holding what those passes would change (an empty text block, a
foreign tool id or encrypted reasoning, a replayed web search, an advisor block, or on
the Responses route a tool call's foreign id, a null or a cache mark) takes LiteLLM's
route instead (`lean_covers`).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Hashable
from typing import Any, Literal, Protocol

import aiohttp
import orjson

from proxy.conversation.identity import compact
from proxy.errors import UpstreamFailure
from proxy.upstream import adapter, reading
from proxy.upstream.lean import DirectClient, Events, chained, parsed_reply, unfinished
from proxy.upstream.pieces import Pieces

__all__ = [
    "ITEMS",
    "Native",
    "NativeApi",
    "NativeClient",
    "NativeStream",
    "lean_covers",
    "native_events",
    "native_json",
    "native_text",
    "rewritten_at",
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

    # Once `request` is made: its messages (input items) as JSON, and whether LiteLLM's
    # route would send them as they are (`lean_covers`); None where it was not worked out.
    serialized: tuple[bytes, bool] | None

    def request(
        self, chat: dict[str, Any], summarized: bool, mid_system: bool, session: Hashable = None
    ) -> dict[str, Any]:
        """The planned chat body as this API's call arguments (`model` the model group);
        `mid_system`: whether the model takes a system message mid-conversation where
        it stands; `session`: the turn's session, if any (what is rendered of its
        window is kept by it)."""
        ...

    def completion(self, reply: dict[str, Any]) -> dict[str, Any]:
        """The provider's reply as a chat completion (what the engine stores)."""
        ...

    def stream(self) -> NativeStream: ...


async def _sse_events(
    pieces: AsyncIterator[Any], limit: int
) -> AsyncIterator[tuple[str, dict, bytes]]:
    """Server-sent events, whole, from transport pieces of bytes, each at most `limit`
    bytes (`proxy.upstream.reading`): each event's type, its data, its exact bytes."""
    async for events in reading.events_of(pieces, limit):
        for raw in events:
            parsed = _event(raw)
            if parsed is not None:
                yield parsed[0], parsed[1], raw if raw.endswith(b"\n\n") else raw + b"\n\n"


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


def native_text(api: NativeApi, reply: dict[str, Any]) -> str:
    """The text a native reply says (its text blocks; its output messages' text)."""
    if api == "anthropic_messages":
        blocks = reply.get("content") or []
    else:
        blocks = [
            part
            for item in reply.get("output") or []
            if isinstance(item, dict) and item.get("type") == "message"
            for part in item.get("content") or []
        ]
    kinds = ("text", "output_text")
    return "".join(
        str(b.get("text") or "") for b in blocks if isinstance(b, dict) and b.get("type") in kinds
    )


async def native_events(
    api: NativeApi, response: Any, reader: NativeStream, limit: int, sse: bool = False
) -> AsyncIterator[Events]:
    """A native stream as relayed bytes and chat chunks, event by event: LiteLLM hands
    Anthropic's stream over as the provider's bytes, OpenAI's Responses stream as event
    objects (serialized here as OpenAI sends them). A stream that ends before the API's
    own end of reply (`message_stop`; `response.completed` or `response.incomplete`:
    where the reader finishes the turn) failed, as a chat stream with no finish does:
    closed early, or with what was not JSON (LiteLLM skips such data on the Responses
    route), it raises, so the door ends it with its error event and nothing is stored.
    `sse`: `response` is the provider's bytes on either API (the lean path); `limit`:
    the most bytes one of its events may take (`proxy.upstream.reading`)."""
    sse = sse or api == "anthropic_messages"
    events = _sse_events(response, limit) if sse else _serialized(response)
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


# What LiteLLM's route would change in a request's messages or input items (see the
# module's docstring), found in their bytes: broad on purpose, a match only means the
# request takes that route.
_BLANK = rb'":"(?:\s|\\[nrtbf])*"'  # an empty (or blank) string value
_FOREIGN = rb'":"[^"]*[^A-Za-z0-9_\-"]'  # an id with a character outside Anthropic's
_REWRITTEN = {
    "anthropic_messages": (
        b'"text' + _BLANK,
        b'"thinking' + _BLANK,
        b'"id' + _FOREIGN,
        b'"tool_use_id' + _FOREIGN,
        b"web_search_tool_result",
        b"advisor",
        re.escape(adapter.encrypted_reasoning_prefix()),
    ),
    # A tool call's id that is not OpenAI's (LiteLLM drops it), a null, a cache mark.
    "responses": (rb'"id":"(?!fc|ctc|rs_|msg_)', b"null", b'"cache_control"'),
}
# Searched for as one alternation in a message (one call), and each on its own in a
# long run of them: each begins with a literal, which `re` scans for at memchr's pace,
# where the alternation tries every pattern at every byte (13 ms, not 6, for the
# overhead benchmark's 1.4 MB of messages).
_ANY = {api: re.compile(b"|".join(patterns)).search for api, patterns in _REWRITTEN.items()}
_EACH = {api: [re.compile(p).search for p in patterns] for api, patterns in _REWRITTEN.items()}
_LONG = 16 << 10
# The field of each API's request that holds the conversation.
ITEMS = {"anthropic_messages": "messages", "responses": "input"}


def lean_covers(api: NativeApi, items: bytes) -> bool:
    """Whether the lean path sends these messages (input items) as LiteLLM's route would."""
    return rewritten_at(api, items) < 0


def rewritten_at(api: NativeApi, items: bytes | memoryview) -> int:
    """Where the first thing LiteLLM's route would change begins in `items`, or -1."""
    if len(items) < _LONG:
        found = _ANY[api](items)
        return found.start() if found else -1
    starts = [found.start() for search in _EACH[api] if (found := search(items))]
    return min(starts, default=-1)


class NativeClient(DirectClient):
    """The lean path for the doors' own APIs: called by the Router with the chosen
    deployment's settings merged into `params`, beside `native_api`, `native_request`
    (the call's parameters) and `native_items` (its messages or input, serialized)."""

    async def native_complete(self, **params: Any) -> dict[str, Any]:
        started = time.time()
        try:
            async with self._native_post(params, stream=False) as response:
                data = parsed_reply(await reading.whole(response, self.limit), params)
        except Exception as exc:
            failed = self._failed(params, exc, started)
            raise failed from chained(failed, exc)
        self._succeeded(params, data.get("usage"), started)
        return data

    async def native_stream(self, **params: Any) -> AsyncIterator[Events]:
        """Open the stream (errors before the first byte raise here, where the Router can
        retry or fall back); the events follow when iterated."""
        started = time.time()
        context = self._native_post(params, stream=True)
        response = await self._opened(context, params, started)
        return self._native_events(context, response, params, started)

    async def _native_events(
        self, context: Any, response: aiohttp.ClientResponse, params: dict[str, Any], started: float
    ) -> AsyncIterator[Events]:
        usage: Any = None
        api, reader = params["native_api"], params["native_reader"]
        try:
            pieces = response.content.iter_any()
            async for events in native_events(api, pieces, reader, self.limit, sse=True):
                for chunk in events.chunks:
                    usage = chunk.get("usage") or usage
                yield events
        except Exception as exc:
            failed = self._failed(params, exc, started)
            raise failed from chained(failed, exc)
        finally:
            with contextlib.suppress(Exception):
                await context.__aexit__(None, None, None)
        self._succeeded(params, usage, started)

    def _native_post(self, params: dict[str, Any], *, stream: bool) -> Any:
        api: NativeApi = params["native_api"]
        request = params["native_request"] | {"stream": stream}
        extra_body = request.pop("extra_body", None)  # carried as it is, as LiteLLM does
        url, fixed, body = _call(
            api,
            adapter.get_llm_provider(model=params["model"], api_base=params.get("api_base"))[0],
            orjson.dumps(request),
            params.get("api_key"),
            params.get("api_base"),
            bool(params.get("drop_params")),
        )
        headers = dict(fixed)
        extra = params.get("extra_headers")
        if isinstance(extra, dict):
            headers |= {str(k): str(v) for k, v in extra.items()}
        if extra_body:
            body = orjson.dumps(orjson.loads(body) | extra_body)
        field = b',"' + ITEMS[api].encode() + b'":'
        data = Pieces((body[:-1] + field, params["native_items"], b"}"))  # the items not copied
        return self._send(params, url, data, headers, stream=stream)


# What `_call` keeps, in all (its requests and the bodies made of them): an agent's
# parameters (tools, its system prompt) are tens of KB, a hostile body's megabytes. And
# how many: each holds its key, headers and URL too, uncounted. (Before they were kept
# as bytes of their own size, a burst of distinct ones, the issue 51 fuzz, kept 136 MB
# in orjson's buffers within 16 MiB of counted bytes.)
KEPT_CALL_BYTES = 16 << 20
KEPT_CALLS = 256

_Made = tuple[str, tuple[tuple[str, str], ...], bytes]  # the URL, headers and body


class _Calls:
    """`_call`'s results, the latest `KEPT_CALLS` of them within `KEPT_CALL_BYTES` (its
    request's bytes and its body's), least recently used first."""

    def __init__(self) -> None:
        self.held = 0
        self._known: OrderedDict[tuple[Any, ...], _Made] = OrderedDict()

    def get(self, arguments: tuple[Any, ...]) -> _Made | None:
        found = self._known.get(arguments)
        if found is not None:
            self._known.move_to_end(arguments)
        return found

    def put(self, arguments: tuple[Any, ...], made: _Made) -> None:
        self._known[arguments] = made
        self.held += len(arguments[2]) + len(made[2])
        while (self.held > KEPT_CALL_BYTES or len(self._known) > KEPT_CALLS) and len(
            self._known
        ) > 1:
            dropped, its = self._known.popitem(last=False)
            self.held -= len(dropped[2]) + len(its[2])


_calls = _Calls()


def _call(
    api: NativeApi, model: str, request: bytes, key: str | None, base: str | None, drop: bool
) -> _Made:
    """What LiteLLM's route makes of a request's parameters (its messages or input
    aside): the URL, headers and body JSON to send them with. A pure function of its
    arguments, worked out once for the parameters an agent sends turn after turn (it
    looks the model up in LiteLLM's map several times)."""
    arguments = (api, model, request, key, base, drop)
    made = _calls.get(arguments)
    if made is None:
        params = orjson.loads(request)
        if api == "anthropic_messages":
            url, headers, body = adapter.anthropic_messages_call(model, params, key, base, drop)
        else:
            url, headers, body = adapter.responses_call(model, params, key, base)
        made = url, tuple(headers.items()), compact(orjson.dumps(body))
        _calls.put((api, model, compact(request), key, base, drop), made)
    return made
