"""What a model's tokens cost, and how its provider's prompt cache works.

Prices are USD per token, from LiteLLM's cost map or a deployment's own
(`proxy.upstream.limits.model_prices`). Two kinds of prompt cache matter to what a
conversation costs: an automatic one (OpenAI's) keeps every exact prompt prefix of
1,024 tokens or more and bills a later read of it at `cache_read`; one with breakpoints
(Anthropic's) keeps only prefixes that end at a `cache_control` mark, bills writing them
at `cache_write` (1.25x input for its 5-minute TTL) and reading them at `cache_read`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from proxy.costs.usage import Usage

__all__ = ["AUTOMATIC_MIN_TOKENS", "AUTOMATIC_STEP", "CacheStyle", "Prices", "cache_style"]

CacheStyle = Literal["automatic", "breakpoints", "none"]
# The shortest prefix an automatic cache keeps, and the steps it reads longer ones in.
AUTOMATIC_MIN_TOKENS = 1024
AUTOMATIC_STEP = 128


@dataclass(frozen=True, slots=True)
class Prices:
    """One model's prices (USD per token) and its prompt cache."""

    input: float
    output: float
    cache_read: float
    cache_write: float  # what a token written to the cache costs (OpenAI: = input)
    cache: CacheStyle = "automatic"
    ttl_seconds: float = 300.0  # how long a cached prefix stays after its last use

    def cost(self, usage: Usage) -> float:
        """What a call cost at its reported usage: uncached input, cache reads, cache
        writes and output, each at its own price."""
        uncached = max(0, usage.prompt - usage.cache_read - usage.cache_write)
        return (
            uncached * self.input
            + usage.cache_read * self.cache_read
            + usage.cache_write * self.cache_write
            + usage.output * self.output
        )


def cache_style(provider_model: str) -> CacheStyle:
    """The prompt cache a provider's model has: Claude's (on Anthropic, Bedrock or Vertex
    AI) caches at breakpoints; the others cache automatically."""
    name = provider_model.lower()
    provider, _, rest = name.partition("/")
    if provider == "anthropic":
        return "breakpoints"
    if provider in ("bedrock", "vertex_ai", "bedrock_converse") and "claude" in rest:
        return "breakpoints"
    if not rest and name.startswith("claude"):  # a bare name LiteLLM gives to Anthropic
        return "breakpoints"
    return "automatic"
