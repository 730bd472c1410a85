"""Message identity: canonical form, content hashes and the hash chain.

Clients echo assistant messages back in slightly different shapes (string vs
text parts, `content: null` vs missing, extra SDK fields).  Identity must not
depend on those details, or every echo would look like an edit and fork the
session.  The canonical form is only used for hashing: messages forwarded
upstream or stored keep the exact dict the client sent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

import orjson

__all__ = [
    "ANTHROPIC_CONTENT",
    "GENESIS",
    "NATIVE_FIELDS",
    "RESPONSES_OUTPUT",
    "SYSTEM_ROLES",
    "Message",
    "canonical",
    "chain",
    "chain_hash",
    "compact",
    "message_hash",
    "same_messages",
    "shared_messages",
    "split_system",
]

Message = dict[str, Any]
"""The one conversation model: a Chat Completions message, exactly as the client sent it
(or as its door translated it). Stored, counted, planned and sent in this one shape."""

GENESIS = ""
"""Chain hash before the first message (h[-1])."""

SYSTEM_ROLES = ("system", "developer")  # a tuple: `in` never raises on a list

# A chat message's field that keeps an assistant turn's blocks as they came, where the
# chat form cannot hold them all (a server tool's call and result, citations).
ANTHROPIC_CONTENT = "anthropic_content"
# A chat message's field that keeps a model's turn of Responses output items as they
# came, where the chat form cannot hold them all (reasoning, a hosted tool's call).
RESPONSES_OUTPUT = "responses_output"
# The fields a stored reply keeps of what only its door's own API can say (`proxy.upstream.native`).
NATIVE_FIELDS = (ANTHROPIC_CONTENT, RESPONSES_OUTPUT)


def canonical(message: Message) -> dict[str, Any]:
    """Return the identity form of an OpenAI chat message."""
    result: dict[str, Any] = {"role": message.get("role")}
    content = _canonical_content(message.get("content"))
    if content is not None:
        result["content"] = content
    if message.get("name"):
        result["name"] = message["name"]
    if message.get("tool_calls"):
        result["tool_calls"] = [_canonical_tool_call(call) for call in message["tool_calls"]]
    if message.get("tool_call_id"):
        result["tool_call_id"] = message["tool_call_id"]
    return result


def message_hash(message: Message) -> str:
    """Content hash of a message's canonical form (32 hex chars)."""
    return hashlib.blake2b(_dumps(canonical(message)), digest_size=16).hexdigest()


def chain_hash(previous: str, message_hash: str) -> str:
    """h[i] = H(h[i-1] || hash(m[i])); hashes are fixed-width, so no separator is needed."""
    return hashlib.blake2b((previous + message_hash).encode(), digest_size=16).hexdigest()


def chain(hashes: Iterable[str], start: str = GENESIS) -> list[str]:
    """Running chain hashes; `result[i]` identifies the whole prefix up to message i."""
    result: list[str] = []
    head = start
    for digest in hashes:
        head = chain_hash(head, digest)
        result.append(head)
    return result


def split_system(
    messages: list[Message],
) -> tuple[list[Message], list[Message]]:
    """Split into leading system/developer messages and the conversation."""
    index = 0
    while (
        index < len(messages)
        and isinstance(messages[index], dict)
        and messages[index].get("role") in SYSTEM_ROLES
    ):
        index += 1
    return messages[:index], messages[index:]


def _canonical_content(content: Any) -> Any:
    # "", [] and None all mean "no content": clients echo tool-call turns either way.
    if isinstance(content, list):
        parts = [_canonical_part(part) for part in content]
        if all(part.get("type") == "text" for part in parts):
            content = "".join(part["text"] for part in parts)
        else:
            return parts
    return content if content not in (None, "") else None


def _canonical_part(part: Any) -> dict[str, Any]:
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if part.get("type") == "text":
        return {"type": "text", "text": part.get("text") or ""}
    return dict(part)


def _canonical_tool_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    return {
        "id": call.get("id"),
        "type": call.get("type") or "function",
        "function": {
            "name": function.get("name"),
            "arguments": _canonical_arguments(function.get("arguments")),
        },
    }


def _canonical_arguments(arguments: Any) -> Any:
    # Frameworks re-serialize arguments ('{"a":1}' -> '{"a": 1}'); compare the JSON value.
    if isinstance(arguments, str):
        try:
            return _dumps(json.loads(arguments)).decode()
        except ValueError:
            return arguments
    return _dumps(arguments).decode()


def _dumps(value: Any) -> bytes:
    """Compact JSON with sorted keys (orjson; json only for what orjson refuses, such as
    integers beyond 64 bits)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def compact(data: bytes) -> bytes:
    """`data` in a bytes object of its own size, to keep: orjson's output keeps its
    buffer's capacity, 4 KiB at least and up to twice its length (a kept rendering held
    it for every turn; the native route's kept calls 74 MB where 8 MB was counted)."""
    return bytes(memoryview(data))


def same_messages(these: list[Any], those: list[Any]) -> bool:
    """Whether two lists hold the same messages: as many, the first and the last the very
    same objects, and the rest equal. A list's `==` takes an identical item at a
    pointer's cost (a window of the kept messages is checked at C speed, 15 times faster
    than a Python call per item), and a list built apart fails at its ends, not by value."""
    if len(these) != len(those):
        return False
    return not these or (these[0] is those[0] and these[-1] is those[-1] and these == those)


def shared_messages(these: list[Any], those: list[Any]) -> int:
    """How many first messages two lists share: the first the very same object and the
    rest equal, as `same_messages` compares them, the first that differs found by halves."""
    count = min(len(these), len(those))
    if not count or these[0] is not those[0]:
        return 0
    if these[:count] == those[:count]:
        return count
    low, high = 1, count  # the first `low` are shared; one in [low, high) differs
    while high - low > 1:
        middle = (low + high) // 2
        if these[low:middle] == those[low:middle]:
            low = middle
        else:
            high = middle
    return low
