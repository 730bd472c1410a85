"""When a fold pays for the prompt-cache rewrite it causes, by the rent-or-buy rule, and what
it keeps verbatim, by the cost of the turns that follow: pure arithmetic, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.costs.prices import Prices

__all__ = [
    "SHARES",
    "CacheRates",
    "Kept",
    "Prompt",
    "fold_due",
    "fold_pays",
    "kept_share",
    "rates",
]

# The shares of the room a fold chooses from when the cost chooses what it keeps verbatim:
# never more than half, so a recall block always has the other half to find what a
# question needs in, and less only where a recall block cannot fill what that frees.
SHARES = (0.1, 0.2, 0.3, 0.4, 0.5)


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


@dataclass(frozen=True, slots=True)
class Kept:
    """What a fold's choice of verbatim window weighs, in tokens."""

    stable: int
    """What every request reads as it is: tools, system, the summary's earlier segments."""
    budget: int
    """Where the next fold comes."""
    room: int
    """What a share is of: the budget less system and tools."""
    growth: float
    """Tokens one request adds."""
    users: float
    """User turns per request: each brings a recall block of its own."""
    summary: int
    """Tokens the fold's segment takes."""
    recall: int
    """The most a recall block takes (0: no recall); it fills what the prompt leaves."""


def kept_share(kept: Kept, rates: CacheRates, shares: tuple[float, ...] = SHARES) -> float:
    """The share of `room` to keep verbatim that costs least per token of growth until the
    next fold: a larger window is read again by every request and rewritten by every fold,
    and brings the next fold nearer; a smaller one leaves room a recall block fills with
    tokens no cache holds (the next user turn asks something else)."""
    costs = {
        share: _per_token(kept, rates, share)
        for share in shares
        # A recall block that fills what a smaller window frees trades verbatim messages
        # for recalled ones (on LoCoMo, 0.4 points of its figure).
        if share == shares[-1] or kept.recall < kept.budget - _start(kept, share)
    }
    return min(costs, key=lambda share: (costs[share], share))


def _start(kept: Kept, share: float) -> float:
    """The prompt right after a fold that keeps `share` of the room."""
    return kept.stable + kept.summary + share * kept.room


def _per_token(kept: Kept, rates: CacheRates, share: float) -> float:
    """The cost of one token of growth, in uncached input tokens, over a cycle that starts
    at the fold keeping `share` of the room and ends when the budget forces the next."""
    window = share * kept.room
    start = _start(kept, share)
    end = kept.budget
    grows = end - start  # what the cycle adds before the next fold
    growth = max(kept.growth, 1.0)
    if grows < growth:
        return float("inf")  # the next request would fold again
    reads = rates.read * (start + end) / 2 / growth
    # The next fold: its summary, the segment and window written anew, its prompt read.
    fold = kept.summary * rates.output
    fold += (kept.summary + window) * max(0.0, rates.write - rates.read) + end * rates.read
    cap = kept.recall
    recalled = grows / 2 if cap >= grows else cap - cap * cap / (2 * grows)  # on average
    return reads + fold / grows + kept.users * rates.write * recalled / growth


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
