"""The fuzz benchmark's upstream: `python -m tests.benchmarks.fuzz_upstream PORT [BYTES]`.

The test upstream (`tests/upstream.py`, in all three of its APIs), answering a short
echo, and hostile for a request whose last user message carries `[[fuzz-upstream:KIND]]`
(the proxy forwards it as any text, unaware): it chooses how to misbehave from the
request alone, so the proxy's cooperation is never needed. The kinds, in the API the
request came in and streamed or not as it asked:

- `huge`: a valid reply of BYTES (24 MiB: within the proxy's default cap of 32) of
  text, whole or as events;
- `endless-event`: one SSE event that never ends (no blank line) growing to twice BYTES
  (past the cap); not streamed, a JSON body that never closes, as long;
- `error-event`: a stream whose second event is an error with a message LiteLLM does not
  know ("Internal server error"); not streamed, a 500 saying the same;
- `cut`: the connection reset after two events (or half of a declared body);
- `not-json`: an HTML page where JSON was due, or events of no JSON;
- `wrong-shape`: valid JSON of the wrong shape (`[]`, `{"choices": 5}`, ...).

A Messages request whose `container` is `MODE:eNNN` is answered that status (the issue's
404 that benched a shared deployment). A request the test upstream itself fails on (it
was written for well-formed requests) is answered 400, as a provider refuses what it
cannot read; `GET /fuzz/stats` counts those and every hostile answer given.
"""

from __future__ import annotations

import asyncio
import collections
import re
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import uvicorn
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tests.upstream import FakeUpstream, Reply

KINDS = ("huge", "endless-event", "error-event", "cut", "not-json", "wrong-shape")
MARKER = re.compile(r"\[\[fuzz-upstream:([a-z-]+)\]\]")
CONTAINER = re.compile(r"MODE:e([1-5]\d\d)")
HUGE_BYTES = 24 << 20
PIECE = 64 << 10  # one event's text, in a long stream
UNKNOWN_ERROR = "Internal server error"
WRONG_SHAPES = (b"[]", b"null", b'{"choices": 5}', b'{"content": "x"}', b'{"output": [{}]}')


def api_of(path: str) -> str:
    """The API a request to `path` speaks: chat, messages or responses."""
    if path.endswith("/messages"):
        return "messages"
    return "responses" if path.endswith("/responses") else "chat"


def last_user_text(api: str, body: Any) -> str:
    """The last user message's text in any of the three APIs; "" for a body of a shape
    none of them has (the fuzz sends those on purpose)."""
    if not isinstance(body, dict):
        return ""
    items = body.get("input" if api == "responses" else "messages")
    if isinstance(items, str):
        return items
    for item in reversed(items if isinstance(items, list) else []):
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, str):
            return content
        parts = content if isinstance(content, list) else []
        return " ".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
    return ""


class HostileUpstream:
    """An ASGI app around the test upstream's, hostile where a request asks it to be."""

    def __init__(self, size: int = HUGE_BYTES) -> None:
        self.inner = FakeUpstream(record=False, exact_usage=False)
        self.inner.default = Reply(respond=self._echo)
        self.app = self.inner.app()
        self.size = size
        self.text = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
        self.stats: collections.Counter[str] = collections.Counter()

    @staticmethod
    def _echo(body: dict[str, Any]) -> str:
        api = "responses" if "input" in body else "chat"  # Messages reads as chat does
        return "echo: " + last_user_text(api, body)[:200]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"] == "/fuzz/stats":
            return await JSONResponse(dict(self.stats))(scope, receive, send)
        raw = await _read(receive)
        replay = _replay(raw)
        api = api_of(scope["path"])
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = None
        hostile = self._hostile(api, body)
        if hostile is not None:
            self.stats[hostile[0]] += 1
            return await hostile[1](scope, replay, send)
        await self._guarded(api, scope, replay, send)

    def _hostile(self, api: str, body: Any) -> tuple[str, ASGIApp] | None:
        """What to answer instead of the test upstream, and its name for the stats."""
        container = body.get("container") if isinstance(body, dict) else None
        found = CONTAINER.fullmatch(container) if isinstance(container, str) else None
        if found:
            status = int(found[1])
            return f"container {status}", _error(api, status, "container not found")
        marker = MARKER.search(last_user_text(api, body))
        if marker is None or marker[1] not in KINDS:
            return None
        kind, stream = marker[1], isinstance(body, dict) and body.get("stream") is True
        model = str(body.get("model")) if isinstance(body, dict) else "m"
        return f"{kind} ({api}, {'streamed' if stream else 'whole'})", self._reply(
            kind, api, model, stream
        )

    def _reply(self, kind: str, api: str, model: str, stream: bool) -> ASGIApp:
        if kind == "huge" and stream:
            return _events(_long_stream(api, model, self.text))
        if kind == "huge":
            return Response(_whole(api, model, self.text), media_type="application/json")
        if kind == "endless-event":
            if stream:
                opening = b"".join(_opening(api, model)) + b"data: "
            else:
                opening = b'{"id": "x", "choices": [{"message": {"content": "'
            return _events(_endless(opening, 2 * self.size), stream)
        if kind == "error-event" and stream:
            return _events(_with_error(api, model))
        if kind == "error-event":
            return _error(api, 500, UNKNOWN_ERROR)
        if kind == "cut":
            return _cut(api, model, stream)
        if kind == "not-json" and stream:
            return _events(_chunks([b"data: {this is not json\n\n", b"data: <html>\n\n"]))
        if kind == "not-json":
            return Response(b"<html><body>502 Bad Gateway</body></html>", media_type="text/html")
        shape = WRONG_SHAPES[len(model) % len(WRONG_SHAPES)]
        if stream:
            return _events(_chunks([b"data: " + shape + b"\n\n", b"data: [DONE]\n\n"]))
        return Response(shape, media_type="application/json")

    async def _guarded(self, api: str, scope: Scope, receive: Receive, send: Send) -> None:
        """The test upstream's answer; a 400 where it failed on the request (a 500)."""
        started = False
        refused = False

        async def guarded(message: Message) -> None:
            nonlocal started, refused
            if refused:
                return
            if message["type"] == "http.response.start" and message["status"] == 500:
                refused = True
                self.stats["refused (the test upstream could not read it)"] += 1
                await _error(api, 400, "invalid request")(scope, receive, send)
                return
            started = True
            await send(message)

        try:
            await self.app(scope, receive, guarded)
        except Exception:
            if not started and not refused:
                self.stats["refused (the test upstream could not read it)"] += 1
                await _error(api, 400, "invalid request")(scope, receive, send)
            elif not refused:
                raise


async def _read(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(raw: bytes) -> Receive:
    """A `receive` that gives `raw` once, then waits as for a disconnect."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    return receive


def _error(api: str, status: int, message: str) -> Response:
    """An error in `api`'s shape, of the type a provider gives `status`."""
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    if api == "messages":
        error: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        error = {"error": {"message": message, "type": kind, "code": None}}
    return JSONResponse(error, status_code=status)


def _events(events: AsyncIterator[bytes], stream: bool = True) -> Response:
    media = "text/event-stream" if stream else "application/json"
    return StreamingResponse(events, media_type=media)


async def _chunks(pieces: list[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


async def _endless(opening: bytes, size: int) -> AsyncIterator[bytes]:
    """`opening`, then text with no newline, to `size` bytes; then the connection ends."""
    yield opening
    filler = b"a" * PIECE
    for _ in range(size // PIECE):
        yield filler
        await asyncio.sleep(0)


def _sse(kind: str | None, data: dict[str, Any]) -> bytes:
    head = b"event: " + kind.encode() + b"\n" if kind else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def _opening(api: str, model: str) -> list[bytes]:
    """A stream's first events, before any text."""
    if api == "messages":
        usage = {"input_tokens": 10, "output_tokens": 1}
        message: dict[str, Any] = {"id": "msg_fuzz", "type": "message", "role": "assistant"}
        message["model"] = model
        message |= {"content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
        start = {"index": 0, "content_block": {"type": "text", "text": ""}}
        return [
            _sse("message_start", {"type": "message_start", "message": message}),
            _sse("content_block_start", {"type": "content_block_start", **start}),
        ]
    if api == "responses":
        response = {"id": "resp_fuzz", "object": "response", "created_at": int(time.time())}
        response |= {"status": "in_progress", "model": model, "output": []}
        return [_sse("response.created", {"type": "response.created", "response": response})]
    return [_sse(None, _chat_chunk(model, {"role": "assistant", "content": ""}))]


def _chat_chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "chatcmpl-fuzz", "object": "chat.completion.chunk", "model": model} | {
        "created": int(time.time()),
        "choices": [choice],
    }


def _delta(api: str, model: str, text: str, number: int) -> bytes:
    if api == "messages":
        delta = {"type": "text_delta", "text": text}
        return _sse(
            "content_block_delta", {"type": "content_block_delta", "index": 0} | {"delta": delta}
        )
    if api == "responses":
        data = {"type": "response.output_text.delta", "item_id": "msg_fuzz", "output_index": 0}
        data |= {"content_index": 0, "delta": text, "sequence_number": number}
        return _sse("response.output_text.delta", data)
    return _sse(None, _chat_chunk(model, {"content": text}))


def _closing(api: str, model: str, text: str) -> list[bytes]:
    """A stream's last events, after its text (a Responses stream repeats the text)."""
    if api == "messages":
        delta = {"stop_reason": "end_turn", "stop_sequence": None}
        return [
            _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
            _sse(
                "message_delta",
                {"type": "message_delta", "delta": delta, "usage": {"output_tokens": 9}},
            ),
            _sse("message_stop", {"type": "message_stop"}),
        ]
    if api == "responses":
        response = orjson.loads(_whole(api, model, text))
        return [_sse("response.completed", {"type": "response.completed", "response": response})]
    return [_sse(None, _chat_chunk(model, {}, "stop")), b"data: [DONE]\n\n"]


async def _long_stream(api: str, model: str, text: str) -> AsyncIterator[bytes]:
    for event in _opening(api, model):
        yield event
    for number, start in enumerate(range(0, len(text), PIECE)):
        yield _delta(api, model, text[start : start + PIECE], number)
        await asyncio.sleep(0)
    for event in _closing(api, model, text):
        yield event


async def _with_error(api: str, model: str) -> AsyncIterator[bytes]:
    yield _opening(api, model)[0]
    if api == "messages":
        error = {"type": "error", "error": {"type": "api_error", "message": UNKNOWN_ERROR}}
        yield _sse("error", error)
    elif api == "responses":
        yield _sse("error", {"type": "error", "code": "server_error", "message": UNKNOWN_ERROR})
    else:
        yield _sse(
            None, {"error": {"message": UNKNOWN_ERROR, "type": "server_error", "code": None}}
        )


def _cut(api: str, model: str, stream: bool) -> Response:
    """Two events and a reset; or half of a whole reply's declared length."""
    if stream:
        events = [*_opening(api, model), _delta(api, model, "half a", 0)][:2]

        async def cut() -> AsyncIterator[bytes]:
            for event in events:
                yield event
            raise ConnectionResetError("the fuzz upstream cuts the stream")

        return _events(cut())
    whole = _whole(api, model, "a reply cut in half")

    async def half() -> AsyncIterator[bytes]:
        yield whole[: len(whole) // 2]
        raise ConnectionResetError("the fuzz upstream cuts the reply")

    return StreamingResponse(
        half(), media_type="application/json", headers={"content-length": str(len(whole))}
    )


def _whole(api: str, model: str, text: str) -> bytes:
    """A whole reply carrying `text`, in `api`'s shape."""
    if api == "messages":
        usage = {"input_tokens": 10, "output_tokens": len(text) // 4}
        return orjson.dumps(
            {
                "id": "msg_fuzz",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": usage,
            }
        )
    if api == "responses":
        part = {"type": "output_text", "text": text, "annotations": []}
        item = {"type": "message", "id": "msg_fuzz", "role": "assistant", "status": "completed"}
        usage = {"input_tokens": 10, "output_tokens": len(text) // 4, "total_tokens": 0}
        return orjson.dumps(
            {
                "id": "resp_fuzz",
                "object": "response",
                "created_at": int(time.time()),
                "status": "completed",
                "model": model,
                "output": [item | {"content": [part]}],
                "usage": usage,
            }
        )
    message = {"role": "assistant", "content": text}
    return orjson.dumps(
        {
            "id": "chatcmpl-fuzz",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 9, "total_tokens": 19},
        }
    )


def main(port: int, size: int) -> None:
    uvicorn.run(HostileUpstream(size), host="127.0.0.1", port=port, log_level="error")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else HUGE_BYTES)
