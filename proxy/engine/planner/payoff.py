"""When a fold pays for the prompt-cache rewrite it causes, by the rent-or-buy rule: pure
arithmetic, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.costs.prices import Prices

__all__ = ["CacheRates", "Prompt", "fold_due", "fold_pays", "rates"]


@dataclass(frozen=True, slots=True)
class CacheRates:
    """What a cache read, a cache write and an output token cost relative to one uncached
    input token (Anthropic bills a write 1.25x; OpenAI's cost what input does)."""

    read: float = 0.25
    write: float = 1.0
    output: float = 4.0


@dataclass(frozen=True, slots=True)
class Prompt:
    """A session's prompt in tokens, as it is and as a fold would leave it."""

    now: int
    """The prompt the next request sends without a fold."""
    folded: int
    """The prompt right after the fold."""
    stable: int
    """What the fold leaves byte-identical at the head: tools, system, earlier segments."""
    budget: int
    growth: int
    """Tokens one turn adds (the new messages and the reply)."""
    summary: int
    """Tokens the summarizer writes for one fold."""


def fold_pays(prompt: Prompt, rates: CacheRates, *, cold: bool) -> bool:
    """Whether a fold now costs less than the cache reads it saves: fold once the turns
    since the last fold have paid a fold's cost to reread what the window grew."""
    grown = prompt.now - prompt.folded
    if grown <= 0:
        return False
    # A cold cache (idle past its time to live) is written whole by the next request anyway:
    # the fold costs no rewrite, so any real shrink pays.
    if cold:
        return True
    # A fold rewrites what follows the head it leaves byte-identical, and the summarizer
    # writes a summary; what it reads is no reason to wait (every message is folded once).
    rewrite = max(0, prompt.folded - prompt.stable) * max(0.0, rates.write - rates.read)
    fold = rewrite + prompt.summary * rates.output
    # Rent or buy: a window growing g tokens a turn has paid W * W / (2 * g) rereads by the
    # time it grew W.
    return grown * grown * rates.read >= 2 * max(prompt.growth, 1) * fold


def fold_due(prompt: Prompt, rates: CacheRates) -> bool:
    """Whether to make the next fold now, ahead of the request that needs it: the budget
    forces one within two turns, or folding pays while the cache is warm."""
    return prompt.now + 2 * prompt.growth > prompt.budget or fold_pays(prompt, rates, cold=False)


def rates(prices: Prices | None) -> CacheRates:
    """A model's cache prices relative to its input price (unknown: a typical
    automatic cache's)."""
    if prices is None or prices.input <= 0:
        return CacheRates()
    return CacheRates(
        prices.cache_read / prices.input,
        prices.cache_write / prices.input,
        prices.output / prices.input,
    )
