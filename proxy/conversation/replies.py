"""The assistant's reply as a message to store, from a completion or a stream."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.conversation.identity import NATIVE_FIELDS, Message

__all__ = [
    "BYTES_PER_OUTPUT_TOKEN",
    "CUT_MARK",
    "MIN_REPLY_BYTES",
    "StreamedReply",
    "reply_message",
    "stored_reply",
]

# Worded to state no fact (`proxy.facts.statements`): the ledger reads replies too.
CUT_MARK = "[context-proxy kept only the start of this {size:,}-byte reply]"
MIN_REPLY_BYTES = 1 << 20  # the smallest default bound on a stored reply
BYTES_PER_OUTPUT_TOKEN = 32  # a token's text, JSON-escaped, with room to spare


def stored_reply(reply: Message, limit: int) -> Message:
    """The reply as the session keeps it: whole, or when its JSON passes `limit` bytes,
    a marked cut: the start of its text, its tool calls by id and name (so the results
    that answer them still fit) with arguments kept while they fit, nothing else. The
    client was answered whole; a later turn never carries more than `limit` of it."""
    size = len(orjson.dumps(reply))
    if size <= limit:
        return reply
    room = limit // 2
    cut: Message = {"role": reply.get("role") or "assistant"}
    calls = []
    for call in reply.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = str(function.get("arguments") or "")
        kept = arguments if len(arguments) <= room // 2 else "{}"
        room -= len(kept)
        calls.append(call | {"function": {"name": function.get("name", ""), "arguments": kept}})
    text = _text(reply.get("content"))
    head = text.encode()[: max(room, 0)].decode(errors="ignore")
    cut["content"] = (
        f"{head}\n\n{CUT_MARK.format(size=size)}" if head else CUT_MARK.format(size=size)
    )
    if calls:
        cut["tool_calls"] = calls
    return cut


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "".join(p.get("text") or "" for p in parts if isinstance(p, dict))


def reply_message(completion: dict[str, Any]) -> Message | None:
    """The first choice's message (the one a client continues with), or None."""
    choices = completion.get("choices") or []
    if not choices:
        return None
    message = choices[0].get("message") or {}
    reply = _assistant(
        message.get("content"), message.get("tool_calls"), message.get("thinking_blocks")
    )
    return reply | {key: message[key] for key in NATIVE_FIELDS if message.get(key)}


class StreamedReply:
    """Accumulates streamed deltas of choice 0 into one message.

    `message()` is None until a finish_reason arrives: a stream that was cut off
    is never stored as a complete reply.
    """

    def __init__(self) -> None:
        self._content: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._thinking: list[dict[str, Any]] = []
        self._thought: list[str] = []  # the open thinking block's text so far
        self._fields: dict[str, Any] = {}  # the message's own fields, from a native stream
        self.finished = False

    def add(self, chunk: dict[str, Any]) -> None:
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self._content.append(delta["content"])
            for block in delta.get("thinking_blocks") or ():
                self._think(block)
            self._fields |= delta.get("message_fields") or {}
            for call in delta.get("tool_calls") or []:
                entry = self._calls.setdefault(
                    call.get("index", 0),
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                entry["id"] += call.get("id") or ""
                function = call.get("function") or {}
                entry["function"]["name"] += function.get("name") or ""
                entry["function"]["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                self.finished = True

    def _think(self, block: dict[str, Any]) -> None:
        """LiteLLM streams a thinking block as text pieces, then one piece with the
        signature (and the whole text again); a redacted block comes whole."""
        if block.get("type") == "redacted_thinking":
            self._thinking.append(dict(block))
        elif block.get("signature"):
            text = "".join(self._thought)
            self._thinking.append(
                {"type": "thinking", "thinking": text, "signature": block["signature"]}
            )
            self._thought = []
        elif block.get("thinking"):
            self._thought.append(block["thinking"])

    def message(self) -> Message | None:
        if not self.finished:
            return None
        calls = [self._calls[index] for index in sorted(self._calls)]
        message = _assistant("".join(self._content) or None, calls or None, self._thinking)
        return message | self._fields


def _assistant(content: Any, tool_calls: Any, thinking: Any = None) -> Message:
    message: Message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if thinking:  # Anthropic's, signed: sent back as they came
        message["thinking_blocks"] = thinking
    return message
