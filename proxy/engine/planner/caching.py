"""What a turn adds so the provider's prompt cache keeps what did not change (Anthropic's
cache marks, OpenAI's `prompt_cache_key`): pure."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import orjson

from proxy.conversation.identity import ANTHROPIC_CONTENT, Message
from proxy.conversation.needles import needles_in

__all__ = [
    "BREAKPOINTS",
    "cache_key",
    "marked",
    "marks_in",
    "namespaced",
    "unmarked",
]

BREAKPOINTS = 4  # the cache marks Anthropic takes in one request
EPHEMERAL = {"type": "ephemeral"}
_MARK = "cache_control"


def cache_key(secret: bytes, tenant: str, name: str, own: bool = False) -> str:
    """The `prompt_cache_key` for a session (`own`: a client's own key), keyed with the
    deployment's `secret` so no caller can name, and so probe, another tenant's prefixes."""
    kind = "client" if own else "session"
    message = f"prompt-cache\0{kind}\0{tenant}\0{name}".encode()
    return "ctx-" + hmac.new(secret, message, hashlib.sha256).hexdigest()[:32]


def namespaced(body: dict[str, Any], secret: bytes, tenant: str) -> dict[str, Any]:
    """The body with a client's own `prompt_cache_key` made its tenant's, the same for the
    same key so its turns still share the provider's cache."""
    own = body.get("prompt_cache_key")
    if not isinstance(own, str) or not own:
        return body
    return body | {"prompt_cache_key": cache_key(secret, tenant, own, own=True)}


def marked(messages: list[Message], taken: int) -> list[Message]:
    """`messages` with the turn's cache marks beside the `taken` ones the client set, never
    more than Anthropic's four, copying only the messages it marks."""
    lead = 0
    while lead < len(messages) and messages[lead].get("role") == "system":
        lead += 1
    asking = _user_before(messages, len(messages), lead)
    end = _stable_end(messages, asking, lead)
    # The window's stable end, before the recalled history inserted ahead of the user's
    # latest message: that changes every turn, so a mark on the last message never reads
    # back past it.
    wanted = [end]
    # A client that sets no marks of its own: the end of the leading system messages (stable
    # until the next fold) and the last message (the next turn reads all of this one).
    if taken == 0:
        wanted += [lead - 1, len(messages) - 1]
    # Anthropic looks only 20 blocks back from a mark, and an agent's tool loop is longer.
    if end is not None:  # where the previous turn's block began: its write is read there
        wanted.append(_before_systems(messages, _user_before(messages, asking, lead), lead))
    out = list(messages)
    room = BREAKPOINTS - taken
    for position in dict.fromkeys(p for p in wanted if p is not None and p >= 0):
        if room <= 0:
            break
        if not _is_marked(out[position]):  # a client's mark (its TTL) stays as it is
            out[position] = _mark(out[position])
            room -= 1
    return out


def _user_before(messages: list[Message], at: int, lead: int) -> int:
    """The last user message before position `at` (`lead` when there is none), found by
    walking over one turn only."""
    at -= 1
    while at > lead and messages[at].get("role") != "user":
        at -= 1
    return at


def _before_systems(messages: list[Message], at: int, lead: int) -> int | None:
    """The last message before `at` that is not a system message the proxy inserted."""
    at -= 1
    while at >= lead and messages[at].get("role") == "system":
        at -= 1
    return at if at >= lead else None


def _stable_end(messages: list[Message], asking: int, lead: int) -> int | None:
    """The last message before the recalled history inserted ahead of the user's latest
    message (`asking`), where there is any."""
    end = _before_systems(messages, asking, lead)
    return end if end is not None and end < asking - 1 else None


def marks_in(body: bytes) -> int:
    """The cache marks a request's body sets, at most, as its parser reads them: counted in
    its bytes at C speed unless an escape could spell `cache_control` otherwise."""
    counted = needles_in(body)
    if counted is not None:
        return counted.marks
    found, pending = 0, [orjson.loads(body)]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            found += _MARK in value
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return found


def unmarked(message: Message) -> Message:
    """A stored message without the cache marks its request set, since a later request marks
    its own (the same message, not copied, when it has none)."""
    out = message
    if out.get("cache_control") is not None:
        out = {k: v for k, v in out.items() if k != "cache_control"}
    for key in ("content", ANTHROPIC_CONTENT, "tool_calls"):
        value = out.get(key)
        if isinstance(value, list) and any(
            isinstance(part, dict) and "cache_control" in part for part in value
        ):
            parts = [
                {k: v for k, v in part.items() if k != "cache_control"}
                if isinstance(part, dict)
                else part
                for part in value
            ]
            out = out | {key: parts}
    return out


def _mark(message: Message) -> Message:
    """The message with a cache mark on its last content block, where LiteLLM and the
    Messages door both read it."""
    content = message.get("content")
    native = message.get(ANTHROPIC_CONTENT)
    if isinstance(native, list) and native and isinstance(native[-1], dict):
        blocks = [*native[:-1], native[-1] | {"cache_control": EPHEMERAL}]
        message = message | {ANTHROPIC_CONTENT: blocks}
    calls = message.get("tool_calls")
    if not content and isinstance(calls, list) and calls and isinstance(calls[-1], dict):
        return message | {"tool_calls": [*calls[:-1], calls[-1] | {"cache_control": EPHEMERAL}]}
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        return message | {"content": [*content[:-1], content[-1] | {"cache_control": EPHEMERAL}]}
    # A text content becomes one text block (the same prompt to the provider); a tool result
    # is marked as a whole.
    if isinstance(content, str) and content and message.get("role") != "tool":
        return message | {
            "content": [{"type": "text", "text": content, "cache_control": EPHEMERAL}]
        }
    return message | {"cache_control": EPHEMERAL}


def _is_marked(message: Message) -> bool:
    """Whether the message already carries a mark where `_mark` would put one."""
    if message.get("cache_control") is not None:
        return True
    lasts = [message.get(key) for key in ("content", ANTHROPIC_CONTENT, "tool_calls")]
    return any(
        isinstance(value, list)
        and bool(value)
        and isinstance(value[-1], dict)
        and value[-1].get("cache_control") is not None
        for value in lasts
    )
