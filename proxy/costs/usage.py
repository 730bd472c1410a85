"""A provider's reported usage in one shape, whatever the door it came through.

Providers count cached input differently: OpenAI's chat and Responses count every input
token in `prompt_tokens`/`input_tokens` and say how many were read from the cache in
their details; Anthropic's `input_tokens` leaves out the tokens read from and written to
the cache, reported beside it. `Usage.prompt` is always every input token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Usage", "chat_usage", "usage_of"]


@dataclass(frozen=True, slots=True)
class Usage:
    """One call's tokens as the provider counted them."""

    prompt: int  # all input tokens, cached and written included
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt + other.prompt,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
            self.output + other.output,
        )

    def to_dict(self) -> dict[str, int]:
        """As a plan record keeps it."""
        return {
            "prompt": self.prompt,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "output": self.output,
        }


def usage_of(data: Mapping[str, Any] | None) -> Usage | None:
    """The usage in any door's shape (chat, Anthropic Messages, Responses), or None when
    there is none to read (no usage, or no input count in it)."""
    if not data:
        return None
    read = _int(data.get("cache_read_input_tokens"))
    write = _int(data.get("cache_creation_input_tokens"))
    if "prompt_tokens" in data:  # chat (LiteLLM may add Anthropic's two fields to it)
        cached = _int(_details(data, "prompt_tokens_details").get("cached_tokens"))
        return Usage(
            _int(data.get("prompt_tokens")),
            max(cached, read),
            write,
            _int(data.get("completion_tokens")),
        )
    if "input_tokens" not in data:
        return None
    output = _int(data.get("output_tokens"))
    details = _details(data, "input_tokens_details")
    if details or not (read or write):  # Responses: input_tokens counts every input token
        cached = _int(details.get("cached_tokens"))
        return Usage(_int(data.get("input_tokens")), cached, 0, output)
    # Anthropic Messages: input_tokens excludes what was read from or written to the cache.
    return Usage(_int(data.get("input_tokens")) + read + write, read, write, output)


def chat_usage(data: Mapping[str, Any] | None) -> dict[str, Any]:
    """Any door's usage in chat terms, the cache's share kept: every input token is a
    prompt token, those read from the cache are `prompt_tokens_details.cached_tokens`
    (and `cache_read_input_tokens`), those written `cache_creation_input_tokens`."""
    usage = usage_of(data) or Usage(0)
    return {
        "prompt_tokens": usage.prompt,
        "completion_tokens": usage.output,
        "total_tokens": usage.prompt + usage.output,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read},
        "cache_read_input_tokens": usage.cache_read,
        "cache_creation_input_tokens": usage.cache_write,
    }


def _details(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    details = data.get(name)
    return details if isinstance(details, Mapping) else {}


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0
