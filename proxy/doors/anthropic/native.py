"""The Messages door's own API to an Anthropic deployment (`proxy.upstream.native`).

The planned chat window goes back into Anthropic's shape, the inverse of
`messages.to_chat`: leading system messages (the client's, then the proxy's summary
and memory) become `system` blocks, each run of tool messages and the user message
after it one user turn of `tool_result` blocks (`is_error` and breakpoints kept), an
assistant message its thinking blocks (signed), text and `tool_use` blocks. A turn
that sends a summary marks it with a cache breakpoint, where the four Anthropic
allows leave room, so the prefix up to the summary is cached until the next fold.
Everything else the client sent of the Messages API (server tools, `thinking`,
`output_config`, `context_management`, …) goes as it came.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Hashable
from typing import Any

import orjson

from proxy.conversation.identity import ANTHROPIC_CONTENT, compact
from proxy.costs.usage import chat_usage
from proxy.doors.anthropic.stream import ERROR_STATUS, event
from proxy.doors.base import UNTYPED_EVENT, typed
from proxy.doors.translations import Rendered, Rendering, Renderings, joined
from proxy.errors import UpstreamFailure
from proxy.upstream.failures import said_in
from proxy.upstream.native import NativeApi, lean_covers

__all__ = ["MessagesNative", "arguments", "native_content"]

_CHAT_BLOCKS = {
    "text": frozenset({"type", "text", "cache_control"}),
    "tool_use": frozenset({"type", "id", "name", "input", "cache_control"}),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
}

# What of the client's body goes to the provider besides the planned window: the
# Messages API's own parameters (never LiteLLM's call arguments, such as `api_base`).
_FORWARDED = (
    "max_tokens",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "thinking",
    "output_config",
    "context_management",
    "cache_control",
    "container",
    "inference_geo",
    "speed",
    "metadata",
)
_BREAKPOINTS = 4  # cache breakpoints Anthropic takes in one request
_USES = b'"type":"tool_use"'  # a tool call in a turn's JSON (quotes in a text are escaped)
# Before a system message sent as a user turn (a model that refuses the role there).
SYSTEM_NOTE = "(A system message, not the user's words:)"
_EPHEMERAL = {"type": "ephemeral"}
_DATA_URL = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)
_FINISH = {"end_turn": "stop", "max_tokens": "length", "tool_use": "tool_calls"}
_REPAIRED = operator.attrgetter("repaired")


class MessagesNative:
    api: NativeApi = "anthropic_messages"
    # Fast mode where the model has it; LiteLLM fits Claude's thinking and effort itself.
    optional: tuple[tuple[str, str], ...] = (("speed", "speed"),)

    def __init__(
        self,
        body: dict[str, Any],
        renderings: Renderings | None = None,
        conversation: Hashable = None,
    ) -> None:
        self._body = body
        self._renderings = renderings or Renderings()
        self._conversation = conversation  # its key, for a request of no session
        self.serialized: tuple[bytes, bool] | None = None

    def drop(self, name: str) -> bool:
        return self._body.pop(name, None) is not None

    def request(
        self,
        chat: dict[str, Any],
        summarized: bool,
        mid_system: bool,
        session: Hashable = None,
    ) -> dict[str, Any]:
        messages = chat["messages"]
        lead = 0
        while lead < len(messages) and messages[lead].get("role") == "system":
            lead += 1
        system = [block for m in messages[:lead] for block in _blocks(m.get("content"))]
        # By conversation, and by what the model takes: a turn is rendered for both.
        key = (session if session is not None else self._conversation, mid_system)
        rendered = _Turns(mid_system).of(messages[lead:], self._renderings.taken(key))
        self._renderings.kept(key, rendered)
        window = joined(rendered.turns)
        self.serialized = window, not any(map(_REPAIRED, rendered.turns))
        # The window as the JSON it is already (`orjson.Fragment`): serialized as it is.
        out: dict[str, Any] = {"model": chat["model"], "messages": orjson.Fragment(window)}
        out |= {name: self._body[name] for name in _FORWARDED if self._body.get(name) is not None}
        out["max_tokens"] = chat.get("max_tokens", out.get("max_tokens"))
        if summarized and system and _breakpoints(out, system, window) < _BREAKPOINTS:
            system[-1] = system[-1] | {"cache_control": _EPHEMERAL}  # after the summary
        if system:
            out["system"] = system
        return out

    def completion(self, reply: dict[str, Any]) -> dict[str, Any]:
        """An Anthropic message as a chat completion (a ValueError for what is none: its
        `content` is not a list of typed blocks)."""
        if not typed(reply.get("content")):
            raise ValueError("a message without its content")
        message: dict[str, Any] = {"role": "assistant", "content": None}
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        thinking: list[dict[str, Any]] = []
        for block in reply.get("content") or ():
            kind = block.get("type")
            if kind == "text":
                texts.append(block.get("text") or "")
            elif kind in ("thinking", "redacted_thinking"):
                thinking.append(block)
            elif kind == "tool_use":
                calls.append(_call(block.get("id"), block.get("name"), block.get("input")))
        if texts:
            message["content"] = "".join(texts)
        if calls:
            message["tool_calls"] = calls
        if thinking:
            message["thinking_blocks"] = thinking
        message |= native_content(reply.get("content") or [])
        choice = {"index": 0, "message": message, "finish_reason": _finish(reply)}
        return {"id": reply.get("id"), "choices": [choice], "usage": usage(reply.get("usage"))}

    def stream(self) -> MessagesEvents:
        return MessagesEvents(self._body["model"])


class MessagesEvents:
    """Anthropic's stream read as chat chunks: text, thinking pieces then the signature,
    tool calls by their order; the finish only on `message_stop`, the stream's own end.
    The blocks are kept whole too, for a turn the chat form cannot hold."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._calls = 0
        self._input: dict[str, Any] = {}
        self._stop: str | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._pieces: dict[tuple[Any, str], list[str]] = {}  # (block, field) -> pieces

    def event(self, kind: str, data: dict[str, Any], raw: bytes) -> tuple[bytes, list[dict]]:
        delta: dict[str, Any] = {}
        chunks: list[dict[str, Any]] = []
        if not kind:  # every event of the API names its type: this one is no part of it
            raise UpstreamFailure(UNTYPED_EVENT)
        if kind == "error":
            error = data.get("error")
            said = said_in(data) or "The provider's stream failed."
            named = error.get("type") if isinstance(error, dict) else None
            raise UpstreamFailure(said, provider_status=ERROR_STATUS.get(str(named)))
        if kind == "message_start":
            message = (data.get("message") or {}) | {"model": self._model}  # as asked for
            self._input = message.get("usage") or {}
            raw = event(kind, {k: v for k, v in data.items() if k != "type"} | {"message": message})
        elif kind == "content_block_start":
            block = data.get("content_block") or {}
            self._blocks[data.get("index", len(self._blocks))] = dict(block)
            if block.get("type") == "tool_use":
                call = _call(block.get("id"), block.get("name"), None) | {"index": self._calls}
                call["function"]["arguments"] = ""
                delta = {"tool_calls": [call]}
                self._calls += 1
            elif block.get("type") == "redacted_thinking":
                delta = {"thinking_blocks": [block]}
            elif block.get("type") == "text" and block.get("text"):
                delta = {"content": block["text"]}
        elif kind == "content_block_delta":
            change = data.get("delta") or {}
            self._grow(data.get("index"), change)
            delta = _delta(change, self._calls - 1)
        elif kind == "message_delta":
            self._stop = (data.get("delta") or {}).get("stop_reason")
            given = {k: v for k, v in (data.get("usage") or {}).items() if v is not None}
            used = usage(self._input | given)
            chunks.append({"choices": [], "usage": used})
        elif kind == "message_stop":
            finish = _FINISH.get(str(self._stop), "stop")
            fields = native_content(self._whole())
            end = {"message_fields": fields} if fields else {}
            chunks.append({"choices": [{"index": 0, "delta": end, "finish_reason": finish}]})
        if delta:
            chunks.insert(0, {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        return raw, chunks

    def _grow(self, index: Any, change: dict[str, Any]) -> None:
        """Keep a block's pieces as they come (joined once, at the end)."""
        block = self._blocks.get(index)
        if block is None:
            return
        kind = change.get("type")
        field, key = _PIECES.get(str(kind), ("", ""))
        if field:
            self._pieces.setdefault((index, field), []).append(change.get(key) or "")
        elif kind == "signature_delta":
            block["signature"] = change.get("signature")
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(change.get("citation"))

    def _whole(self) -> list[dict[str, Any]]:
        for (index, field), pieces in self._pieces.items():
            block = self._blocks[index]
            if field == "input":
                block["input"] = arguments("".join(pieces))
            else:
                block[field] = (block.get(field) or "") + "".join(pieces)
        return [self._blocks[index] for index in sorted(self._blocks)]


# A delta's kind -> the block field its pieces make, and the delta's key for a piece.
_PIECES = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "thinking"),
    "input_json_delta": ("input", "partial_json"),
}


def _delta(delta: dict[str, Any], call: int) -> dict[str, Any]:
    kind = delta.get("type")
    if kind == "text_delta":
        return {"content": delta.get("text") or ""}
    if kind == "input_json_delta":
        arguments = {"arguments": delta.get("partial_json") or ""}
        return {"tool_calls": [{"index": call, "function": arguments}]}
    if kind == "thinking_delta":
        return {"thinking_blocks": [{"type": "thinking", "thinking": delta.get("thinking")}]}
    if kind == "signature_delta":
        return {"thinking_blocks": [{"type": "thinking", "signature": delta.get("signature")}]}
    return {}


def usage(used: Any) -> dict[str, Any]:
    """Anthropic's usage in chat terms: every input token, cached or not, is a prompt
    token (Anthropic counts cache reads and writes apart from `input_tokens`); the reads
    and writes are kept beside it (`proxy.costs.usage.chat_usage`)."""
    return chat_usage(used if isinstance(used, dict) else None)


def _finish(reply: dict[str, Any]) -> str:
    return _FINISH.get(str(reply.get("stop_reason")), "stop")


def native_content(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """`{ANTHROPIC_CONTENT: blocks}` where the chat form cannot hold every block (a server
    tool's call or result, a text's citations), else nothing."""
    for block in blocks:
        known = _CHAT_BLOCKS.get(block.get("type", ""))
        if known is None or any(v not in (None, []) for k, v in block.items() if k not in known):
            return {ANTHROPIC_CONTENT: blocks}
    return {}


def arguments(text: Any) -> Any:
    """A tool call's arguments as the object Anthropic's `input` is."""
    try:
        value = orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return {"arguments": text}
    return value if isinstance(value, dict) else {"arguments": value}


def _call(call_id: Any, name: Any, given: Any) -> dict[str, Any]:
    text = orjson.dumps(given if given is not None else {}).decode()
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


# -- the window in Anthropic's shape ----------------------------------------------------


class _Turns:
    """Chat messages as Anthropic turns: tool results and the user message after them
    are one user turn, as they came. A system message mid-conversation (Claude Code's,
    or the proxy's recall block) stays where it stood for a model that takes one there
    (`mid_system`); for any other (before Claude 4.8, which refuses the role) it is a
    user turn in its place, labelled, so everything before it keeps its bytes; one
    between a tool call and its results goes after the results, as a turn between them
    would part them (consecutive user turns are one to Anthropic).

    The turns of the previous rendering that the window keeps (`Rendered.reused`) are
    taken as they are; of the rest, each is taken from it where the same chat messages
    made it (by identity), else made here."""

    def __init__(self, mid_system: bool) -> None:
        self._mid_system = mid_system
        self._known: dict[int, Rendering] = {}
        self._out: list[Rendering] = []
        self._read: list[int] = []
        self._at = 0  # the messages read so far

    def of(self, messages: list[dict[str, Any]], previous: Rendered | None) -> Rendered:
        start = 0
        if previous is not None:
            kept, start = previous.reused(messages)
            self._out, self._read = previous.turns[:kept], previous.read[:kept]
            self._known = {id(turn.sources[0]): turn for turn in previous.turns[kept:]}
        results: list[dict[str, Any]] = []
        held: list[dict[str, Any]] = []  # system turns waiting for the results they interrupt
        for self._at, message in enumerate(messages[start:], start + 1):
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
        return Rendered(messages, self._out, self._read)

    def _results(self, results: list[dict[str, Any]]) -> None:
        if results:
            self._turn(tuple(results), "results", _user_turn)

    def _turn(
        self,
        sources: tuple[dict[str, Any], ...],
        kind: str,
        make: Callable[[tuple[dict[str, Any], ...]], dict[str, Any]],
    ) -> None:
        rendering = self._known.get(id(sources[0]))
        if rendering is None or not rendering.of(sources, kind):
            native = make(sources)
            data = compact(orjson.dumps(native))
            repaired = not lean_covers("anthropic_messages", data)
            rendering = Rendering(sources, kind, data, repaired)
        self._out.append(rendering)
        self._read.append(self._at)

    def _calls(self) -> bool:
        """Whether the last turn is the assistant's and calls tools (its results come next)."""
        return bool(self._out) and self._out[-1].kind == "assistant" and _USES in self._out[-1].json


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
    """Chat content as Anthropic content blocks (the inverse of `messages._part`)."""
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


def _breakpoints(request: dict[str, Any], system: list[dict[str, Any]], window: bytes) -> int:
    """The cache breakpoints a request sets: in its tools, system and window (its JSON's
    `"cache_control"` keys: a text that says it has its quotes escaped)."""
    blocks = [*(request.get("tools") or ()), *system]
    marked = sum(isinstance(b, dict) and b.get("cache_control") is not None for b in blocks)
    return marked + window.count(b'"cache_control"')
