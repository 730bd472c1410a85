"""When a fold pays and what it keeps verbatim, by what the turns until the next fold cost
at the provider's cache prices: pure arithmetic, no I/O."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from proxy.costs.prices import Prices

__all__ = [
    "SHARES",
    "CacheRates",
    "Cycle",
    "Kept",
    "Prompt",
    "cycle",
    "due",
    "fold_due",
    "fold_pays",
    "folded",
    "rates",
]

# The shares of the room a fold chooses from when the cost chooses what it keeps verbatim:
# never more than half, so a recall block always has the other half to find what a
# question needs in.
SHARES = (0.1, 0.2, 0.3, 0.4, 0.5)
# The cycle lengths tried, in requests' growth: from two requests up, a quarter longer
# each (the cost is flat near its least: a quarter is well within its noise).
_STEP = 1.25
_LENGTHS = 48


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
    """The request's: the most a prompt (recall block included) may take."""
    room: int
    """What a share is of: the budget less system and tools."""
    growth: float
    """Tokens one request adds."""
    users: float
    """User turns that ask, per request: each brings a recall block that fills the room
    (one that asks nothing brings only the facts it names)."""
    summary: int
    """Tokens the fold's segment takes."""
    recall: int
    """The most a recall block takes (0: no recall); it fills what the prompt leaves."""


@dataclass(frozen=True, slots=True)
class Cycle:
    """From one fold to the next: what the fold keeps verbatim, and how large the prompt
    grows before the next one."""

    share: float
    """Of the room, kept verbatim."""
    end: int
    """The prompt past which the next fold is due."""


@functools.lru_cache(maxsize=4096)  # sessions at one pace, on one model, share it
def cycle(kept: Kept, rates: CacheRates) -> Cycle:
    """The fold that costs least per token of growth until the next. A larger window is
    read again by every request, rewritten by the fold, and brings the next fold nearer;
    a smaller one leaves room a question's recall block fills with tokens no cache holds
    (the next question asks for other units). A longer cycle rereads what it grew more
    times; a shorter one pays for its fold (the summary written, the window written
    anew, the prompt read by the summarizer) over fewer tokens."""
    growth = max(kept.growth, 1.0)
    best, least = Cycle(SHARES[-1], kept.budget), float("inf")
    for share in SHARES:
        start = _start(kept, share)
        length = 2 * growth
        for _ in range(_LENGTHS):
            if start + length > kept.budget:
                length = kept.budget - start  # the budget forces the fold here
            if length < growth:
                break
            cost = _per_token(kept, rates, share, start, length)
            if cost < least:
                best, least = Cycle(share, int(start + length)), cost
            if start + length >= kept.budget:
                break
            length *= _STEP
    return best


def due(prompt: int, growth: int, budget: int, cycle: Cycle) -> bool:
    """Whether to fold before the next request: it would pass the cycle's end, or the
    budget within two requests."""
    return prompt + growth > cycle.end or prompt + 2 * growth > budget


def _per_token(kept: Kept, rates: CacheRates, share: float, start: float, length: float) -> float:
    """The cost of one token of growth, in uncached input tokens, over a cycle from the
    prompt `start` a fold leaves to `start + length`, where the next fold comes."""
    growth = max(kept.growth, 1.0)
    end = start + length
    reads = rates.read * (start + end) / 2 / growth
    # The next fold: its summary, the segment and window written anew, its prompt read.
    window = share * kept.room
    fold = kept.summary * rates.output
    fold += (kept.summary + window) * max(0.0, rates.write - rates.read) + end * rates.read
    recalled = _mean_recall(kept.budget - end, kept.budget - start, kept.recall)
    return reads + fold / length + kept.users * rates.write * recalled / growth


def folded(stable: int, summary: int, room: int, share: float = SHARES[0]) -> float:
    """The prompt right after a fold that keeps `share` of the `room` verbatim beside
    `stable` and a `summary` (by default the smallest share any fold keeps)."""
    return stable + summary + share * room


def _start(kept: Kept, share: float) -> float:
    return folded(kept.stable, kept.summary, kept.room, share)


def _mean_recall(low: float, high: float, cap: int) -> float:
    """The mean of min(cap, room) for a room spread evenly from `low` to `high`: what a
    recall block takes on average as the prompt grows through the cycle."""
    if cap >= high:
        return (low + high) / 2
    if cap <= low:
        return float(cap)
    return ((cap * cap - low * low) / 2 + cap * (high - cap)) / (high - low)


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
