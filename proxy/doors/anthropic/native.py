"""The Messages door's own API to an Anthropic deployment (`proxy.upstream.native`).

The planned chat window goes back into Anthropic's shape (`proxy.doors.anthropic.render`):
leading system messages (the client's, then the proxy's summary and memory) become
`system` blocks, the rest Anthropic's turns. A turn that sends a summary marks it with a
cache breakpoint, where the four Anthropic allows leave room, so the prefix up to the
summary is cached until the next fold. Everything else the client sent of the Messages
API (server tools, `thinking`, `output_config`, `context_management`, …) goes as it came.
The reply is read back as a chat completion (`proxy.doors.anthropic.response`), a stream
event by event (`proxy.doors.anthropic.events`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import orjson

from proxy.doors.anthropic.events import MessagesEvents
from proxy.doors.anthropic.render import rendered_turns, system_blocks
from proxy.doors.anthropic.response import chat_completion
from proxy.doors.translations import Renderings, Translation, Translations
from proxy.upstream.native import NativeApi

__all__ = ["MessagesNative"]

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
_EPHEMERAL = {"type": "ephemeral"}


class MessagesNative:
    """A Messages request for an Anthropic deployment: the planned window in the API's
    own shape, and the provider's reply read back as the engine stores it."""

    api: NativeApi = "anthropic_messages"
    # Fast mode where the model has it; LiteLLM fits Claude's thinking and effort itself.
    optional: tuple[tuple[str, str], ...] = (("speed", "speed"),)

    def __init__(
        self,
        body: dict[str, Any],
        renderings: Renderings | None = None,
        conversation: bytes | None = None,
        translations: Translations | None = None,
    ) -> None:
        self._body = body
        self._renderings = renderings or Renderings()
        # Its key: its kept translation's, and its rendering's without a session.
        self._conversation = conversation
        self._translations = translations
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
        system = system_blocks(messages[:lead])
        turns = messages[lead:]
        own = self._own(turns, mid_system)
        if own is not None:  # the client's own messages, all of them: as the client wrote them
            window, covered = own.json, own.covered
        else:
            # By conversation, and by what the model takes: a turn is rendered for both.
            key = (session if session is not None else self._conversation, mid_system)
            rendered = rendered_turns(turns, self._renderings.taken(key), mid_system)
            window = rendered.json
            self._renderings.kept(key, rendered)
            covered = rendered.covered
        self.serialized = window, covered
        # The window as the JSON it is already (`orjson.Fragment`): serialized as it is.
        out: dict[str, Any] = {"model": chat["model"], "messages": orjson.Fragment(window)}
        out |= {name: self._body[name] for name in _FORWARDED if self._body.get(name) is not None}
        out["max_tokens"] = chat.get("max_tokens", out.get("max_tokens"))
        if summarized and system and _breakpoints(out, system, window) < _BREAKPOINTS:
            system[-1] = system[-1] | {"cache_control": _EPHEMERAL}  # after the summary
        if system:
            out["system"] = system
        return out

    def _own(self, turns: list[dict[str, Any]], mid_system: bool) -> Translation | None:
        """The translation of the client's messages, where the window is all of them and
        the model takes them as they are (a system message among them only where it
        takes one mid-conversation)."""
        if self._translations is None:
            return None
        own = self._translations.saying(self._conversation, turns)
        return own if own is not None and (mid_system or own.system < 0) else None

    def completion(self, reply: dict[str, Any]) -> dict[str, Any]:
        """An Anthropic message as a chat completion (a ValueError for what is none)."""
        return chat_completion(reply)

    def stream(self) -> MessagesEvents:
        return MessagesEvents(self._body["model"])


def _breakpoints(request: dict[str, Any], system: list[dict[str, Any]], window: bytes) -> int:
    """The cache breakpoints a request sets: in its tools, system and window (its JSON's
    `"cache_control"` keys: a text that says it has its quotes escaped)."""
    blocks = [*(request.get("tools") or ()), *system]
    marked = sum(isinstance(b, dict) and b.get("cache_control") is not None for b in blocks)
    return marked + window.count(b'"cache_control"')
