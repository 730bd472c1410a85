"""The planned chat window in Anthropic's shape, the inverse of the request's
translation (`proxy.doors.anthropic.request`): each run of tool messages and the user
message after it one user turn of `tool_result` blocks (`is_error` and breakpoints
kept), an assistant message its thinking blocks (signed), text and `tool_use` blocks,
or the blocks it came with where the chat form could not hold them.

Each turn is rendered on its own, as JSON, and kept (`proxy.doors.translations`): the
next request of the conversation renders only the turns it does not share with it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

from proxy.conversation.identity import ANTHROPIC_CONTENT, compact
from proxy.doors.anthropic.response import arguments
from proxy.doors.translations import Redrawn, Rendered

__all__ = ["SYSTEM_NOTE", "rendered_turns", "system_blocks"]

_USES = b'"type":"tool_use"'  # a tool call in a turn's JSON (quotes in a text are escaped)
# Before a system message sent as a user turn (a model that refuses the role there).
SYSTEM_NOTE = "(A system message, not the user's words:)"
_DATA_URL = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)


def rendered_turns(
    messages: list[dict[str, Any]], previous: Rendered | None, mid_system: bool
) -> Rendered:
    """The window's messages (after its leading system messages) as Anthropic turns,
    those of the `previous` rendering taken where the window keeps them; `mid_system`:
    whether the model takes a system message mid-conversation where it stands."""
    return _Turns(Redrawn("anthropic_messages", messages, previous), mid_system).rendered(messages)


def system_blocks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """System messages as the blocks of Anthropic's `system`."""
    return [block for m in messages for block in _blocks(m.get("content"))]


class _Turns:
    """Chat messages as Anthropic turns: tool results and the user message after them
    are one user turn, as they came. A system message mid-conversation (Claude Code's,
    or the proxy's recall block) stays where it stood for a model that takes one there
    (`mid_system`); for any other (before Claude 4.8, which refuses the role) it is a
    user turn in its place, labelled, so everything before it keeps its bytes; one
    between a tool call and its results goes after the results, as a turn between them
    would part them (consecutive user turns are one to Anthropic).

    The turns of the previous rendering are taken where the window keeps them
    (`Redrawn`); the others are made here."""

    def __init__(self, drawn: Redrawn, mid_system: bool) -> None:
        self._drawn = drawn
        self._mid_system = mid_system
        self._at = 0  # the messages read so far

    def rendered(self, messages: list[dict[str, Any]]) -> Rendered:
        drawn = self._drawn
        results: list[dict[str, Any]] = []
        held: list[dict[str, Any]] = []  # system turns waiting for the results they interrupt
        for self._at, message in enumerate(messages[drawn.start :], drawn.start + 1):
            role = message.get("role")
            if role == "tool":
                results.append(message)
                continue
            if role == "system" and not self._mid_system and not results and self._calls():
                held.append(message)
                continue
            if role == "user" and not held:
                self._turn((*results, message), "user", _user_turn)
            else:
                self._results(results)
                for system in held:
                    self._turn((system,), "held", _held)
                if role == "user":
                    self._turn((message,), "user", _user_turn)
                elif role == "assistant":
                    self._turn((message,), "assistant", _assistant_turn)
                elif self._mid_system:
                    self._turn((message,), "system", _system_turn)
                else:
                    self._turn((message,), "held", _held)
            results, held = [], []
        self._at = len(messages) + 1  # what comes at the end depends on where it ends
        self._results(results)
        for system in held:
            self._turn((system,), "held", _held)
        return drawn.rendered()

    def _results(self, results: list[dict[str, Any]]) -> None:
        if results:
            self._turn(tuple(results), "results", _user_turn)

    def _turn(
        self,
        sources: tuple[dict[str, Any], ...],
        kind: str,
        make: Callable[[tuple[dict[str, Any], ...]], dict[str, Any]],
    ) -> None:
        if not self._drawn.taken(sources, kind, self._at):
            self._drawn.made(sources, kind, compact(orjson.dumps(make(sources))), self._at)

    def _calls(self) -> bool:
        """Whether the last turn is the assistant's and calls tools (its results come next)."""
        last = self._drawn.last()
        return last is not None and last[0] == "assistant" and _USES in last[1]


def _user_turn(sources: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """Tool results, and the user message after them if there is one, as one user turn."""
    *tools, last = sources
    if last.get("role") == "tool":
        return {"role": "user", "content": [_result(tool) for tool in sources]}
    return {
        "role": "user",
        "content": _user([_result(tool) for tool in tools], last.get("content")),
    }


def _assistant_turn(sources: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    return _assistant(sources[0])


def _system_turn(sources: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    return _system(sources[0])


def _held(sources: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    return _system_as_user(sources[0])


def _user(results: list[dict[str, Any]], content: Any) -> Any:
    if not results:
        return content if isinstance(content, str) else _blocks(content)
    return results + _blocks(content)


def _system(message: dict[str, Any]) -> dict[str, Any]:
    """A system message mid-conversation (Claude Code's, or the proxy's recall block),
    where it stood."""
    content = message.get("content")
    return {"role": "system", "content": content if isinstance(content, str) else _blocks(content)}


def _system_as_user(message: dict[str, Any]) -> dict[str, Any]:
    """A system message mid-conversation as a user turn, for a model that refuses the
    role there: labelled as not the user's words."""
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else _blocks(content)
    return {"role": "user", "content": [{"type": "text", "text": SYSTEM_NOTE}, *blocks]}


def _assistant(message: dict[str, Any]) -> dict[str, Any]:
    if message.get(ANTHROPIC_CONTENT):
        return {"role": "assistant", "content": message[ANTHROPIC_CONTENT]}
    content = message.get("content")
    if isinstance(content, str) and content and not _called_or_thought(message):
        # As the client wrote it (the request's translation keeps a string a string):
        # the same prompt as one text block, in the client's bytes.
        return {"role": "assistant", "content": content}
    blocks = [dict(block) for block in message.get("thinking_blocks") or ()]
    blocks += _blocks(message.get("content"))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        use = {
            "type": "tool_use",
            "id": call.get("id"),
            "name": function.get("name"),
            "input": arguments(function.get("arguments")),
        }
        if call.get("cache_control") is not None:
            use["cache_control"] = call["cache_control"]
        blocks.append(use)
    return {"role": "assistant", "content": blocks}


def _called_or_thought(message: dict[str, Any]) -> bool:
    return bool(message.get("tool_calls") or message.get("thinking_blocks"))


def _result(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": message.get("tool_call_id"),
        "content": content if isinstance(content, str) else _blocks(content),
    }
    if message.get("is_error"):
        block["is_error"] = True
    if message.get("cache_control") is not None:
        block["cache_control"] = message["cache_control"]
    return block


def _blocks(content: Any) -> list[dict[str, Any]]:
    """Chat content as Anthropic content blocks (the inverse of the request's translation
    of a block)."""
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            block: dict[str, Any] = {"type": "text", "text": part.get("text") or ""}
        elif kind == "image_url":
            url = (part.get("image_url") or {}).get("url")
            block = {"type": "image", "source": _source(url)}
        elif kind == "file":
            url = (part.get("file") or {}).get("file_data")
            block = {"type": "document", "source": _source(url)}
        else:
            continue
        if part.get("cache_control") is not None:
            block["cache_control"] = part["cache_control"]
        blocks.append(block)
    return blocks


def _source(url: Any) -> dict[str, Any]:
    match = _DATA_URL.fullmatch(str(url or ""))
    if match:
        return {"type": "base64", "media_type": match[1], "data": match[2]}
    return {"type": "url", "url": url}
