"""When a fold pays for the prompt-cache rewrite it causes: pure arithmetic, no I/O.

A provider's prompt cache bills the unchanged head of a prompt at a fraction of the
input price. A fold (a new summary segment) changes the prompt after the part it leaves
byte-identical, so the next request writes everything after that part again, and the
summarizer writes a summary. Every message is folded once whatever the schedule, so
what the summarizer reads is no reason to wait; what a fold costs on its own is the
rewrite and the summary written. Not folding costs a little more each turn: the part of
the window grown since the last fold is read again from the cache. The rule is the
rent-or-buy one: fold once what the turns since the last fold paid to read that grown
part again reaches what a fold costs (a window growing `g` tokens a turn has paid
`W * W / (2 * g)` reads by the time it grew `W`). While the cache is cold (the session
was idle longer than its time to live) the next request writes the whole prompt anyway,
so a fold then costs no rewrite: any real shrink pays.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.costs.prices import Prices

__all__ = ["CacheRates", "Prompt", "fold_due", "fold_pays", "rates"]


@dataclass(frozen=True, slots=True)
class CacheRates:
    """What a token costs, relative to one uncached input token: a prompt token read from
    the cache, one written to it (Anthropic bills a write 1.25x; OpenAI's writes cost
    what input does), and an output token (the summary the summarizer writes)."""

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
    """Whether a fold now costs less than the reads it saves (see the module's text)."""
    grown = prompt.now - prompt.folded
    if grown <= 0:
        return False
    if cold:
        return True
    rewrite = max(0, prompt.folded - prompt.stable) * max(0.0, rates.write - rates.read)
    fold = rewrite + prompt.summary * rates.output
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
