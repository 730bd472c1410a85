"""What a turn adds so the provider's prompt cache keeps what did not change: pure.

Between folds the head of the prompt (tools, system messages, the summary, the window's
oldest messages) is byte-stable, and the window grows at its end. Anthropic caches a
prefix only where a request marks it (`cache_control`, four marks at most, reads found
up to 20 blocks back): a turn whose client set no marks of its own is marked at the end
of its leading system messages (tools, system, summary and remembered facts: stable
until the next fold) and on its last message (the next turn reads all of this one from
there). A client that marks its own (Claude Code does) keeps its caching as it is, the
summary's mark added where the four leave room (`proxy.doors.anthropic.native`).
OpenAI caches every prefix by itself and routes a request by its `prompt_cache_key`: a
session's turns share one, derived from the session, when the client sets none.
"""

from __future__ import annotations

import hashlib

from proxy.conversation.identity import Message

__all__ = ["cache_key", "marked", "marks_in"]

EPHEMERAL = {"type": "ephemeral"}


def cache_key(tenant: str, session_id: str) -> str:
    """A session's `prompt_cache_key`: stable for the session, and naming neither it nor
    its tenant."""
    digest = hashlib.sha256(f"{tenant}\0{session_id}".encode()).hexdigest()
    return f"ctx-{digest[:32]}"


def marked(messages: list[Message]) -> list[Message]:
    """`messages` with cache marks after the leading system messages and on the last
    message (for a request that sets no marks of its own: one that does keeps its own
    caching as it is). Only the marked messages are copied; none is changed."""
    lead = 0
    while lead < len(messages) and messages[lead].get("role") == "system":
        lead += 1
    out = list(messages)
    for position in {p for p in (lead - 1, len(messages) - 1) if p >= 0}:
        out[position] = _mark(out[position])
    return out


def marks_in(body: bytes) -> int:
    """The cache marks a request's body sets, at most: its `cache_control` keys, found
    at C speed."""
    return body.count(b'"cache_control"')


def _mark(message: Message) -> Message:
    """The message with a cache mark on its last content block: a text content becomes
    that one block (the same prompt to the provider); a tool result is marked as a
    whole, as LiteLLM and the Messages door both read it."""
    content = message.get("content")
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        return message | {"content": [*content[:-1], content[-1] | {"cache_control": EPHEMERAL}]}
    if isinstance(content, str) and content and message.get("role") != "tool":
        return message | {
            "content": [{"type": "text", "text": content, "cache_control": EPHEMERAL}]
        }
    return message | {"cache_control": EPHEMERAL}
