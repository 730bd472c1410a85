"""A real OpenAI-compatible chat server for tests, recording what it receives.

It answers `POST /v1/chat/completions` (plain and SSE streaming) on a loopback
socket. By default it echoes the last user message; tests queue `Reply`s to
make it return tool calls, fail with a status, stall, or break mid-stream.

It bills every prompt through the providers' prompt caches (`tests/prompt_cache.py`)
on its `clock`, and reports usage as each provider does: cached tokens on chat and
Responses, cache reads and writes beside `input_tokens` on Messages.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import importlib.util
import itertools
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import tiktoken
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests import upstream_messages as messages_api
from tests import upstream_responses as responses_api
from tests.prompt_cache import MAX_BREAKPOINTS, AutomaticCache, BreakpointCache, Use
from tests.servers import serve


@dataclass
class Reply:
    """What the upstream does for one request."""

    content: str | None = None  # None: echo the last user message
    tool_calls: list[dict[str, Any]] | None = None
    status: int = 200
    error_message: str = "upstream failure"
    stall_seconds: float = 0.0
    fail_after_chunks: int | None = None  # streaming: drop the connection after N chunks
    headers: dict[str, str] = field(default_factory=dict)  # on an error reply
    raw: bytes | None = None  # the body is these bytes (not JSON, say), with `status`
    # streaming: how the stream ends. "done": the last chunk's finish_reason, then [DONE];
    # "clean": closed after the content, without either; "garbage": events of no JSON;
    # "error": the API's own error event (`error_message`), after `fail_after_chunks`.
    stream_end: str = "done"
    error_event: bool = False  # streaming: a 200 whose first event is an error
    stall_after_chunks: int | None = None  # streaming: stall (stall_seconds) after N chunks
    # Computes the answer from the request body: the content, or a whole Reply.
    respond: Callable[[dict[str, Any]], str | Reply] | None = None
    # Messages API: thinking blocks the reply starts with (signatures and all), then
    # any other blocks before its text (a server tool's call and result, say).
    thinking: list[dict[str, Any]] = field(default_factory=list)
    blocks: list[dict[str, Any]] = field(default_factory=list)
    # A reply whose text is this many bytes (-1: without end), sent in pieces as it is
    # made: whole, one JSON object; streamed, the events before the text (at most
    # `fail_after_chunks` of them), then one event of the text with no blank line.
    flood: int | None = None


# The text a flooding reply is made with, where the flood goes (`flooded`).
FLOOD = "FLOOD-TEXT-GOES-HERE"
_PIECE = (b"lorem ipsum dolor sit amet " * 2428)[:65536]  # words, as replies are
_BYTES_A_TOKEN = 4  # a Messages or Responses body's bytes a token, where usage is not exact


async def flooded(events: list[bytes], size: int, before: int | None) -> AsyncIterator[bytes]:
    """`events` up to the first holding FLOOD (at most `before` of them), then that one
    with `size` bytes of text for FLOOD (-1: without end), in 64 KiB pieces: a whole
    reply is one such event, whole; a stream's ends there, with no blank line."""
    at = next(index for index, event in enumerate(events) if FLOOD.encode() in event)
    for event in events[: at if before is None else min(at, before)]:
        yield event
    head, tail = events[at].split(FLOOD.encode(), 1)
    yield head
    sent = 0
    while size < 0 or sent < size:
        piece = _PIECE if size < 0 else _PIECE[: size - sent]
        sent += len(piece)
        yield piece
        await asyncio.sleep(0)
    if len(events) == 1:  # a whole reply: its JSON closes
        yield tail


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    usage: dict[str, Any] = field(default_factory=dict)  # as reported (empty: none was)


@dataclass
class FakeUpstream:
    """Scriptable upstream. `base_url` ends in `/v1`, like OpenAI's."""

    requests: list[Received] = field(default_factory=list)
    replies: collections.deque[Reply] = field(default_factory=collections.deque)
    default: Reply = field(default_factory=Reply)
    base_url: str = ""
    record: bool = True  # keep every request (benchmarks turn it off to save memory)
    in_flight: int = 0  # requests being answered right now
    require_key: bool = False  # answer 401 to a request without an Authorization header
    hung_up: int = 0  # requests whose caller hung up while they stalled or flooded
    # tiktoken usage and the prompt caches; off: a cheap estimate (chat: 50 tokens a
    # message; Messages and Responses: the body's bytes over `_BYTES_A_TOKEN`) and no
    # cache, so benchmarks time the proxy, not the fake provider's tokenizer
    exact_usage: bool = True
    clock: Callable[[], float] = time.time  # what the prompt caches' TTLs run on
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Iterator[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        """Empty the prompt caches (they read `clock` as it is at each request, so a
        test may set its own clock on a running upstream)."""
        self.automatic = AutomaticCache(lambda: self.clock())  # chat and Responses (OpenAI)
        self.breakpoints = BreakpointCache(lambda: self.clock())  # Messages (Anthropic)

    def queue(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def chat_requests(self) -> list[Received]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def messages_requests(self) -> list[Received]:
        return [r for r in self.requests if r.path.endswith("/messages")]

    def responses_requests(self) -> list[Received]:
        return [r for r in self.requests if r.path.endswith("/responses")]

    def _next(self) -> Reply:
        with self._lock:
            return self.replies.popleft() if self.replies else self.default

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": []})

    async def _chat(self, request: Request) -> Response:
        self.in_flight += 1
        try:
            return await self._answer(request)
        finally:
            self.in_flight -= 1

    async def _messages(self, request: Request) -> Response:
        """Anthropic's Messages API: the same scripted replies, in Anthropic's shapes."""
        raw = await request.body()
        body = orjson.loads(raw)
        received = Received(request.url.path, dict(request.headers), body)
        if self.record:
            self.requests.append(received)
        refused = messages_api.misplaced_system(body)
        if refused is not None:
            error = {"type": "invalid_request_error", "message": refused}
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        # Each block's tokens where usage is exact, or where the body may set too many
        # breakpoints (its JSON names `cache_control` as a key more often than they may
        # be: a text that says it has its quotes escaped); else none, as cheap as chat's.
        exact = self.exact_usage or raw.count(b'"cache_control"') > MAX_BREAKPOINTS
        blocks = messages_api.prompt_blocks(body, memo_tokens) if exact else []
        marks = sum(block.ttl is not None for block in blocks)
        if marks > MAX_BREAKPOINTS:
            error = {
                "type": "invalid_request_error",
                "message": "A maximum of 4 blocks with cache_control may be provided."
                f" Found {marks}.",
            }
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        reply = self._next()
        if reply.respond is not None:
            answer = reply.respond(body)
            reply = answer if isinstance(answer, Reply) else Reply(content=answer)
        stall_first = reply.stall_seconds and reply.stall_after_chunks is None
        if stall_first and await self._stalled(request, reply.stall_seconds):
            return Response(status_code=499)  # nobody is listening any more
        if reply.raw is not None:
            return self._raw(reply)
        if reply.status != 200:
            error = {"type": "api_error", "message": reply.error_message}
            return JSONResponse(
                {"type": "error", "error": error}, status_code=reply.status, headers=reply.headers
            )
        content = FLOOD if reply.flood is not None else reply.content
        if content is None and not reply.tool_calls:
            content = f"echo: {messages_api.last_user_text(body)}"
        content_blocks = messages_api.message_blocks(
            content, reply.tool_calls, [*reply.thinking, *reply.blocks]
        )
        used = self.breakpoints.use(blocks) if self.exact_usage else Use(len(raw) // _BYTES_A_TOKEN)
        usage = received.usage = {
            "input_tokens": used.uncached,
            "cache_creation_input_tokens": used.written,
            "cache_read_input_tokens": used.cached,
            "output_tokens": count_text_tokens(json.dumps(content_blocks)),
        }
        answer = messages_api.message(
            f"msg_test_{next(self._ids)}", body["model"], content_blocks, usage
        )
        if reply.flood is not None:
            stream = messages_api.message_sequence(answer) if body.get("stream") else None
            return self._flooding(answer, stream, reply)
        if body.get("stream"):
            events = messages_api.message_events(answer, reply)
            return StreamingResponse(events, media_type="text/event-stream")
        return JSONResponse(answer)

    async def _responses(self, request: Request) -> Response:
        """OpenAI's Responses API: the same scripted replies, in its shapes (`blocks` are
        output items before the text: reasoning, say)."""
        raw = await request.body()
        body = orjson.loads(raw)
        received = Received(request.url.path, dict(request.headers), body)
        if self.record:
            self.requests.append(received)
        reply = self._next()
        if reply.respond is not None:
            answer = reply.respond(body)
            reply = answer if isinstance(answer, Reply) else Reply(content=answer)
        stall_first = reply.stall_seconds and reply.stall_after_chunks is None
        if stall_first and await self._stalled(request, reply.stall_seconds):
            return Response(status_code=499)  # nobody is listening any more
        if reply.raw is not None:
            return self._raw(reply)
        if reply.status != 200:
            error = {"message": reply.error_message, "type": "server_error", "code": None}
            return JSONResponse({"error": error}, status_code=reply.status, headers=reply.headers)
        content = FLOOD if reply.flood is not None else reply.content
        if content is None and not reply.tool_calls:
            content = f"echo: {responses_api.last_user_text(body)}"
        number = next(self._ids)
        items = responses_api.output(number, content, reply.tool_calls, reply.blocks)
        if self.exact_usage:
            used = self._automatic(responses_api.prompt_tokens(body, memo_tokens), body)
        else:
            used = Use(len(raw) // _BYTES_A_TOKEN)
        prompt, completion = used.prompt, count_text_tokens(json.dumps(items))
        usage = received.usage = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": used.cached},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        }
        answer = responses_api.response(number, body, items, usage)
        if reply.flood is not None:
            stream = responses_api.response_sequence(answer) if body.get("stream") else None
            return self._flooding(answer, stream, reply)
        if body.get("stream"):
            events = responses_api.response_events(answer, reply)
            return StreamingResponse(events, media_type="text/event-stream")
        return JSONResponse(answer)

    @staticmethod
    def _raw(reply: Reply) -> Response:
        """A reply of `reply.raw`'s bytes, with its status and headers."""
        assert reply.raw is not None
        kind = "application/json"
        return Response(reply.raw, status_code=reply.status, headers=reply.headers, media_type=kind)

    def _flooding(
        self, answer: dict[str, Any], stream: list[bytes] | None, reply: Reply
    ) -> Response:
        """`answer` (or its `stream` of events) with `reply.flood` bytes of text in it; a
        caller that hangs up before its end is counted (`hung_up`)."""
        assert reply.flood is not None
        events = stream if stream is not None else [json.dumps(answer).encode()]
        kind = "text/event-stream" if stream is not None else "application/json"

        async def pieces() -> AsyncIterator[bytes]:
            try:
                async for piece in flooded(events, reply.flood or 0, reply.fail_after_chunks):
                    yield piece
            except asyncio.CancelledError:
                self.hung_up += 1
                raise

        return StreamingResponse(pieces(), media_type=kind)

    def _automatic(self, tokens: list[int], body: dict[str, Any]) -> Use:
        """An OpenAI prompt's tokens billed by the automatic cache (when usage is exact)."""
        if not self.exact_usage:
            return Use(len(tokens))
        key = body.get("prompt_cache_key")
        return self.automatic.use(tokens, key if isinstance(key, str) else None)

    async def _stalled(self, request: Request, seconds: float) -> bool:
        """Wait `seconds`; True (and counted) if the caller hangs up meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if await request.is_disconnected():
                self.hung_up += 1
                return True
            await asyncio.sleep(0.02)
        return False

    async def _answer(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        received = Received(request.url.path, dict(request.headers), body)
        if self.record:
            self.requests.append(received)
        if self.require_key and not request.headers.get("authorization"):
            error = {"message": "You didn't provide an API key.", "type": "invalid_request_error"}
            return JSONResponse({"error": error}, status_code=401)
        reply = self._next()
        if reply.respond is not None:
            answer = reply.respond(body)
            reply = answer if isinstance(answer, Reply) else Reply(content=answer)
        stall_first = reply.stall_seconds and reply.stall_after_chunks is None
        if stall_first and await self._stalled(request, reply.stall_seconds):
            return Response(status_code=499)  # nobody is listening any more
        if reply.raw is not None:
            return self._raw(reply)
        if reply.status != 200:
            error = {"message": reply.error_message, "type": "upstream_error", "code": None}
            return JSONResponse({"error": error}, status_code=reply.status, headers=reply.headers)
        content = FLOOD if reply.flood is not None else self._content(reply, body)
        completion_id = f"chatcmpl-test-{next(self._ids)}"
        if self.exact_usage:
            used = self._automatic(prompt_tokens(body), body)
            completion_tokens = len(_ENCODING.encode(content or ""))
        else:
            used, completion_tokens = Use(len(body["messages"]) * 50), len(content or "") // 4
        usage = received.usage = {
            "prompt_tokens": used.prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": used.prompt + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": used.cached},
        }
        if body.get("stream"):
            chunks = _chunks(completion_id, body, content, reply.tool_calls, usage)
            if reply.flood is not None:
                events = [f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks]
                return self._flooding({}, events, reply)
            if reply.error_event:
                chunks = [{"error": {"message": reply.error_message, "code": 500}}]
            return StreamingResponse(
                self._sse(chunks, reply),
                media_type="text/event-stream",
            )
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        finish = "tool_calls" if reply.tool_calls else "stop"
        choices = [
            {"index": i, "message": message, "finish_reason": finish, "logprobs": None}
            for i in range(int(body.get("n") or 1))
        ]
        answer = {
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "test-model"),
            "choices": choices,
            "usage": usage,
        }
        if reply.flood is not None:
            return self._flooding(answer, None, reply)
        return JSONResponse(answer)

    async def _sse(self, chunks: list[dict[str, Any]], reply: Reply) -> AsyncIterator[bytes]:
        """The events; a stall after `reply.stall_after_chunks` of them counts a caller
        that hangs up meanwhile (Starlette cancels a stream whose client left)."""
        stall_at = reply.stall_after_chunks
        events = _sse(chunks, reply.fail_after_chunks, reply.stream_end, reply.error_message)
        async for index, event in _numbered(events):
            if index == stall_at:
                try:
                    await asyncio.sleep(reply.stall_seconds)
                except asyncio.CancelledError:
                    self.hung_up += 1
                    raise
            yield event

    @staticmethod
    def _content(reply: Reply, body: dict[str, Any]) -> str | None:
        if reply.content is not None or reply.tool_calls:
            return reply.content
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        last = users[-1].get("content") if users else ""
        if isinstance(last, list):
            last = " ".join(p.get("text", "") for p in last if isinstance(p, dict))
        return f"echo: {last}"


def _offline_encoding(name: str) -> tiktoken.Encoding:
    """tiktoken's BPE file from the litellm wheel: tests never download."""
    spec = importlib.util.find_spec("litellm")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(spec.submodule_search_locations[0], "litellm_core_utils", "tokenizers")
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(folder))
    return tiktoken.get_encoding(name)


_ENCODING = _offline_encoding("o200k_base")


@functools.lru_cache(maxsize=16384)
def memo_tokens(text: str) -> tuple[int, ...]:
    """`text_tokens`, remembered: a conversation's messages come again in every request,
    and the prompt caches tokenize every request whole."""
    return tuple(_ENCODING.encode(text))


def count_text_tokens(text: str) -> int:
    """Tokens of a text by o200k (what the test upstream reports as completion tokens)."""
    return len(text_tokens(text))


def text_tokens(text: str) -> list[int]:
    """A text's o200k tokens."""
    return _ENCODING.encode(text)


def count_prompt_tokens(body: dict[str, Any]) -> int:
    """Prompt tokens by OpenAI's published recipe (o200k), independent of the proxy's code.

    3 tokens per message and 1 per name, plus every field's tokens; a tool call is
    3 plus its id, name and arguments; tool schemas are their JSON; 3 prime the reply.
    """
    return len(prompt_tokens(body))


# The recipe's tokens that are no text (a message's 3, a name's 1, the reply's 3): apart
# from any o200k token, so that the prompt caches see where a message begins.
_MESSAGE, _NAME, _PRIME = [-1, -1, -1], [-2], [-3, -3, -3]


def prompt_tokens(body: dict[str, Any]) -> list[int]:
    """A chat prompt's tokens in order (tools, then each message, then the reply's
    priming), by `count_prompt_tokens`'s recipe: what the automatic cache compares."""

    def tokens(value: Any) -> list[int]:
        if isinstance(value, list):
            parts = [part.get("text", "") for part in value if isinstance(part, dict)]
            return [token for part in parts for token in memo_tokens(part)]
        return list(memo_tokens(value if isinstance(value, str) else str(value or "")))

    out = tokens(json.dumps(body["tools"])) if body.get("tools") else []
    for message in body.get("messages", []):
        out += _MESSAGE + (_NAME if message.get("name") else [])
        for key in ("role", "content", "name", "tool_call_id"):
            out += tokens(message.get(key))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            out += _MESSAGE + tokens(call.get("id")) + tokens(function.get("name"))
            out += tokens(function.get("arguments"))
    return out + _PRIME


def _chunks(
    completion_id: str,
    body: dict[str, Any],
    content: str | None,
    tool_calls: list[dict[str, Any]] | None,
    usage: dict[str, int],
) -> list[dict[str, Any]]:
    base = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model", "test-model"),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    if content:
        words = content.split(" ")
        out += [chunk({"content": w if i == 0 else " " + w}) for i, w in enumerate(words)]
    for index, call in enumerate(tool_calls or []):
        function = call["function"]
        head = {"index": index, "id": call["id"], "type": "function"}
        out.append(chunk({"tool_calls": [{**head, "function": {"name": function["name"]}}]}))
        out.append(
            chunk(
                {"tool_calls": [{"index": index, "function": {"arguments": function["arguments"]}}]}
            )
        )
    out.append(chunk({}, "tool_calls" if tool_calls else "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        out.append({**base, "choices": [], "usage": usage})
    return out


async def _numbered(events: AsyncIterator[bytes]) -> AsyncIterator[tuple[int, bytes]]:
    index = 0
    async for event in events:
        yield index, event
        index += 1


async def _sse(
    chunks: list[dict[str, Any]], fail_after: int | None, end: str = "done", error: str = ""
) -> AsyncIterator[bytes]:
    if end == "clean":  # the content, then the connection closes: no finish, no [DONE]
        chunks = [c for c in chunks if not any(x.get("finish_reason") for x in c["choices"])]
    for index, chunk in enumerate(chunks):
        if fail_after is not None and index >= fail_after:
            if end == "error":  # OpenAI's error chunk, then the stream closes
                yield f"data: {json.dumps({'error': {'message': error, 'code': 500}})}\n\n".encode()
                return
            raise ConnectionResetError("test upstream drops the stream")
        if end == "garbage" and index >= 1:
            yield b"data: {this is not json\n\n"
            return
        yield f"data: {json.dumps(chunk)}\n\n".encode()
        await asyncio.sleep(0)
    if end == "done":
        yield b"data: [DONE]\n\n"


@contextmanager
def running_upstream() -> Iterator[FakeUpstream]:
    upstream = FakeUpstream()
    with serve(upstream.app()) as url:
        upstream.base_url = url + "/v1"
        yield upstream
