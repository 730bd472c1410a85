"""HTTP helpers every route shares: a bounded body read, JSON in and out, the caller."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

import orjson
from starlette.requests import ClientDisconnect, Request

from proxy.config.settings import ServerSettings
from proxy.errors import (
    InvalidRequest,
    ProxyError,
    RequestTimeout,
    RequestTooLarge,
    Unauthenticated,
)
from proxy.http.auth import Principal
from proxy.http.browser import require_json
from proxy.http.resends import Parsed, Resends

__all__ = [
    "CONVERSATION",
    "ClientDisconnected",
    "parse_json",
    "parse_resent",
    "principal",
    "read_body",
    "too_deep",
    "unless_disconnected",
]

T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client closed the connection before its answer was ready."""


async def read_body(request: Request, server: ServerSettings) -> bytes:
    """The request body; 413 once it passes `server.max_body_bytes`, 408 if it has not
    all arrived within `server.body_timeout_seconds`. A body up to twice the limit is read
    to its end first (and dropped): a client still sending when the answer comes would see
    its connection reset rather than the 413. A larger one is cut off. Only a JSON body is
    read (`proxy.http.browser`). A client gone mid-body is `ClientDisconnected`."""
    require_json(request.headers)
    limit = server.max_body_bytes
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > 2 * limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(server.body_timeout_seconds):
            async for chunk in request.stream():
                size += len(chunk)
                if size > 2 * limit:
                    raise _too_large(limit)
                if size <= limit:
                    chunks.append(chunk)
    except TimeoutError:
        raise RequestTimeout(
            f"The request body did not arrive within {server.body_timeout_seconds:g} s.",
            code="request_timeout",
        ) from None
    except ClientDisconnect:
        raise ClientDisconnected from None
    if size > limit:
        raise _too_large(limit)
    return b"".join(chunks)


def parse_json(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or an OpenAI-shaped 400 (`checked`)."""
    return _checked(_loaded(orjson.loads, body))


def parse_resent(body: bytes, resends: Resends, key: Hashable, conversation: str) -> Parsed:
    """`parse_json`, a conversation resent under `key` parsed from where it is new
    (`proxy.http.resends`)."""
    parsed = _loaded(lambda raw: resends.parse(raw, key, conversation), body)
    _checked(parsed.data)
    return parsed


def _loaded(loads: Callable[[bytes], T], body: bytes) -> T:
    try:
        return loads(body)
    except orjson.JSONDecodeError:
        raise InvalidRequest("Request body is not valid JSON.", code="invalid_json") from None


def _checked(data: Any) -> dict[str, Any]:
    """`data` if it is a JSON object, else a 400: also one that nests deeper than orjson
    writes (255 levels; it reads 1,024), which could be neither stored nor sent on, nor
    echoed in a reply, and would fail only once the provider was paid (a Responses
    stream, after its headers). Checked by writing the parameters, a C pass over a few
    kilobytes; the conversation is written before any call anyway (its messages are
    hashed, or serialized for the provider), which refuses it as deep."""
    if not isinstance(data, dict):
        raise InvalidRequest("Request body must be a JSON object.", code="invalid_json")
    try:
        orjson.dumps({key: value for key, value in data.items() if key not in _CONVERSATION})
    except orjson.JSONEncodeError:
        raise too_deep() from None
    return data


def too_deep() -> InvalidRequest:
    return InvalidRequest(
        "The request's JSON is nested too deeply (at most 255 levels).", code="invalid_json"
    )


# Where each door's request holds its conversation: `messages` (chat, Messages), `input`
# (Responses).
CONVERSATION = {"chat": "messages", "messages": "messages", "responses": "input"}
_CONVERSATION = frozenset(CONVERSATION.values())


def _too_large(limit: int) -> ProxyError:
    return RequestTooLarge(
        f"Request body exceeds the limit of {limit} bytes.", code="request_too_large"
    )


def principal(request: Request) -> Principal:
    """The caller `AuthMiddleware` authenticated."""
    found = request.scope.get("state", {}).get("principal")
    if not isinstance(found, Principal):  # every route is behind the middleware
        raise Unauthenticated("Not authenticated.", code="invalid_api_key")
    return found


async def unless_disconnected(request: Request, call: Awaitable[T]) -> T:
    """`call`'s result; cancelled, and `ClientDisconnected` raised, as soon as the client
    hangs up, so a request nobody waits for stops costing an upstream call. (Once a
    stream has started, Starlette's StreamingResponse watches for this itself.)"""
    task = asyncio.ensure_future(call)
    watch = asyncio.ensure_future(_hangup(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        watch.cancel()
        raise
    if task.done():
        watch.cancel()
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):  # let it close its upstream connection
        await task
    raise ClientDisconnected


async def _hangup(request: Request) -> None:
    """Returns when the client disconnects (the body is read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
