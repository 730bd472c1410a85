"""The API shapes the proxy serves, its doors (docs/architecture.md).

Each door translates its request into the one conversation model (OpenAI chat
messages and parameters: what the engine plans and the upstream sends to any
provider), and the reply back into its own shape, SSE framing and error body
included. A door knows its wire format and nothing about budgets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeGuard

import orjson
from starlette.responses import JSONResponse, Response

from proxy.conversation.validation import session_id
from proxy.doors.translations import Written
from proxy.engine import Turn
from proxy.upstream.lean import Completion
from proxy.upstream.native import Native

__all__ = [
    "UNTYPED_EVENT",
    "Api",
    "Door",
    "Framer",
    "Inbound",
    "body_session_id",
    "inner_session_id",
    "text_of",
    "typed",
    "unknown_fields",
]

Api = Literal["chat", "messages", "responses"]

# A provider's event in a door's own API that names no type (no `event:` line, no
# `type` field): no event of either API, so the stream is not the API's.
UNTYPED_EVENT = "The provider sent an event of no type: it is not of its API's shape."


class ORJSONResponse(JSONResponse):
    """JSON written by orjson: a long reply is one C call."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


@dataclass(frozen=True, slots=True)
class Inbound:
    """A request as the engine sees it, whichever door it came through."""

    body: dict[str, Any]  # a chat-completions body: model, messages, parameters
    session_id: str | None = None  # named in the body, if at all
    # The body's session id wins over the header's: it names a response to continue
    # (`previous_response_id`), at this transcript length.
    continues: int | None = None
    # The door's own facts, handed back to its `reply` and `framer`.
    extra: dict[str, Any] = field(default_factory=dict)
    # What the client sent that this door does not carry (vendor fields, server tools):
    # dropped, never refused, and said in a header and a metric.
    dropped: tuple[str, ...] = ()
    # Parameters the door translated that not every provider takes, in groups of
    # alternatives: of each group, the first the model takes (every deployment, by
    # LiteLLM's own list) is sent, the rest are not; if it takes none, they are dropped.
    optional: tuple[tuple[str, ...], ...] = ()
    # The request in the door's own API, for a model whose deployments speak it
    # (`proxy.upstream.native`), and what that route does not carry.
    native: Native | None = None
    native_dropped: tuple[str, ...] = ()
    # The body's `messages` as orjson writes them, where the door holds that JSON (its
    # kept translation's): the engine does not write them again.
    messages_json: memoryview | None = None

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """An error as a door writes it: its HTTP status and its OpenAI fields, worked out at
    the HTTP boundary (`proxy.http.errors`), so that a door only renders it."""

    status: int
    type: str  # OpenAI's error type, such as `invalid_request_error`
    message: str
    code: str | None = None
    param: str | None = None
    headers: dict[str, str] | None = None

    def body(self) -> dict[str, dict[str, str | None]]:
        """OpenAI's error body."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "code": self.code,
                "param": self.param,
            }
        }


class Framer(Protocol):
    """One streamed reply's wire framing, fed the upstream's chat chunks in order."""

    def chunks(self, chunks: list[dict[str, Any]], raw: bytes | None) -> bytes: ...

    def relay(self, raw: bytes) -> bytes:
        """An event of the provider's own stream in the door's API (`proxy.upstream.native`)."""
        ...

    def end(self) -> list[bytes]:
        """The stream's last events, each written on its own (a Responses end repeats
        the whole reply four times)."""
        ...

    def error(self, error: ErrorReply) -> bytes: ...


class Door(Protocol):
    api: Api
    # Request headers of the door's API that act on the provider's account (which
    # workspace bills the call, whom it is attributed to): the proxy calls with its own
    # key, so they are not passed on, and are named as dropped when a client sends them.
    unsent_headers: tuple[str, ...]

    async def inbound(
        self, body: dict[str, Any], tenant: str, written: Written | None = None
    ) -> Inbound:
        """The request in the one conversation model (it may read the store: a Responses
        `item_reference` names a stored reply); `written`, its conversation's JSON where
        the body holds it as orjson writes it."""
        ...

    def reply(
        self, completion: Completion, inbound: Inbound, turn: Turn, headers: dict[str, str]
    ) -> Response: ...

    def framer(self, inbound: Inbound, turn: Turn) -> Framer: ...


def unknown_fields(body: dict[str, Any], known: frozenset[str]) -> list[str]:
    """The body's top-level fields a door does not know, in the order they came."""
    return [key for key in body if key not in known]


def body_session_id(body: dict[str, Any], fields: list[str]) -> str | None:
    """The first of `fields` (dotted paths) that `body` has as a string (or as an object
    with a string `id`), checked as a session id (Claude Code's: `inner_session_id`)."""
    for name in fields:
        value: Any = body
        for key in name.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, dict):
            value = value.get("id")
        if isinstance(value, str) and value:
            return session_id(inner_session_id(value), name)
    return None


# Claude Code's `metadata.user_id` before 2.1.78: `user_<hash>_account_<uuid>_session_<uuid>`
# (the account empty without a login).
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_CLAUDE_CODE_USER = re.compile(rf"user_[0-9a-f]+_account_(?:{_UUID})?_session_({_UUID})", re.I)


def inner_session_id(value: str) -> str:
    """The conversation's id inside an id that names more than it: Claude Code's
    `metadata.user_id`, a JSON object (device, account, `session_id`) or its older
    `user_…_account_…_session_<uuid>`; any other value as it is."""
    if value.startswith("{"):
        try:
            found = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
        inner = found.get("session_id") if isinstance(found, dict) else None
        return inner if isinstance(inner, str) and inner else value
    older = _CLAUDE_CODE_USER.fullmatch(value)
    return older.group(1) if older else value


def typed(items: Any) -> TypeGuard[list[dict[str, Any]]]:
    """Whether `items` (a reply's content blocks, its output items) is a list of objects
    that each name their `type`, as every one of either API's does."""
    return isinstance(items, list) and all(
        isinstance(item, dict) and isinstance(item.get("type"), str) for item in items
    )


def text_of(content: Any) -> str:
    """A message's content as text: a string as it is, text parts joined."""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""
