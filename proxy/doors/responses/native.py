"""The Responses door's own API to an OpenAI deployment (`proxy.upstream.native`).

The planned chat window goes back into input items (`proxy.doors.responses.render`),
the client's `instructions` staying instructions. Hosted and namespace tools,
`reasoning`, `include`, `store` and Codex's `client_metadata` go as the client sent
them, `prompt_cache_key` as the engine made it its tenant's
(`proxy.engine.planner.caching`); `previous_response_id` never does: the proxy serves
it, and sends the whole window.
The reply is read back as a chat completion (`proxy.doors.responses.response`), a stream
event by event (`proxy.doors.responses.events`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import orjson

from proxy.doors.responses.events import ResponsesEvents
from proxy.doors.responses.render import plainly, rendered_items
from proxy.doors.responses.request import CARRIED
from proxy.doors.responses.response import chat_completion
from proxy.doors.translations import Renderings, Translations
from proxy.upstream.native import NativeApi

__all__ = ["ResponsesNative"]

# The Responses API's own parameters that go as the client sent them.
_FORWARDED = (
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "top_logprobs",
    "reasoning",
    "text",
    "include",
    "store",
    "metadata",
    "user",
    "prompt",
    "prompt_cache_options",
    "prompt_cache_retention",
    "safety_identifier",
    "service_tier",
    "truncation",
    "context_management",
    "max_tool_calls",
    "background",
    "stream_options",
)


class ResponsesNative:
    """A Responses request for an OpenAI deployment: the planned window as input items,
    and the provider's reply read back as the engine stores it."""

    api: NativeApi = "responses"
    optional: tuple[tuple[str, str], ...] = (("reasoning", "reasoning_effort"),)

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
        self, chat: dict[str, Any], summarized: bool, mid_system: bool, session: Hashable = None
    ) -> dict[str, Any]:
        """The window as a Responses call (OpenAI caches prompt prefixes by itself: a
        summary needs no mark; the session's `prompt_cache_key` keeps its turns together)."""
        messages = chat["messages"]
        out: dict[str, Any] = {"model": chat["model"]}
        instructions = self._body.get("instructions")
        first = messages[0] if messages else {}
        if instructions is not None and first == {"role": "system", "content": instructions}:
            out["instructions"] = instructions
            messages = messages[1:]
        own = (
            self._translations.saying(self._conversation, messages) if self._translations else None
        )
        if own is not None:  # the client's own items, all of them: as the client wrote them
            window, covered = own.json, own.covered
        else:
            key = session if session is not None else self._conversation
            plain = plainly(self._body.get("input"))
            rendered = rendered_items(messages, self._renderings.taken(key), plain)
            window = rendered.json
            self._renderings.kept(key, rendered)
            covered = rendered.covered
        self.serialized = window, covered
        out["input"] = orjson.Fragment(window)  # the JSON it is already, serialized as it is
        out |= {name: self._body[name] for name in _FORWARDED if self._body.get(name) is not None}
        if chat.get("max_tokens") is not None:
            out["max_output_tokens"] = chat["max_tokens"]
        if chat.get("prompt_cache_key"):  # the session's, or the client's made its tenant's
            out["prompt_cache_key"] = chat["prompt_cache_key"]
        carried = {name: self._body[name] for name in CARRIED if name in self._body}
        if carried:
            out["extra_body"] = carried
        return out

    def completion(self, reply: dict[str, Any]) -> dict[str, Any]:
        """A response as a chat completion (a ValueError for what is none)."""
        return chat_completion(reply)

    def stream(self) -> ResponsesEvents:
        return ResponsesEvents()
