"""The providers' prompt caches, as the test upstream simulates them: pure, on a clock
the caller gives (a test or benchmark moves it; nothing here sleeps or reads the time).

Both caches compare token sequences, so a changed byte anywhere in a prompt ends its
cached prefix at that point:

- `AutomaticCache` (OpenAI): an exact prefix of an earlier prompt is read from the
  cache when it is at least 1,024 tokens long, counted in 128-token steps beyond that;
  every prompt is remembered for `ttl` seconds after its last use, apart for each
  `prompt_cache_key` (prompts without one share a pool). Nothing is billed for writing.
- `BreakpointCache` (Anthropic): the prompt is blocks (each tool, each system block,
  each message's content blocks, in that order); only a prefix that ends at a block
  marked with `cache_control` is written, for its TTL (refreshed by every read); a read
  looks for an earlier write at the mark and at up to 20 block boundaries before it.
  Tokens read, tokens written (from the read to the last mark) and the rest are
  reported apart, as Anthropic's usage does.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

MINIMUM = 1024  # the shortest prefix either provider caches (Claude Sonnet and Opus, OpenAI)
STEP = 128  # OpenAI reports cache hits in steps of 128 tokens beyond the minimum
LOOKBACK = 20  # Anthropic checks this many block boundaries before each breakpoint
MAX_BREAKPOINTS = 4  # Anthropic refuses a request with more `cache_control` marks
TTL = 300.0  # both providers' default, in seconds; Anthropic's `"ttl": "1h"` is 3600


@dataclass(frozen=True, slots=True)
class Use:
    """One prompt's tokens as a provider bills them: `prompt` counts all of them, the
    cache's reads and writes included."""

    prompt: int
    cached: int = 0
    written: int = 0

    @property
    def uncached(self) -> int:
        """What Anthropic reports as `input_tokens`: neither read nor written."""
        return self.prompt - self.cached - self.written


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share (compared a block at a time)."""
    size, same = min(len(a), len(b)), 0
    while same + 1024 <= size and a[same : same + 1024] == b[same : same + 1024]:
        same += 1024
    while same < size and a[same] == b[same]:
        same += 1
    return same


@dataclass
class AutomaticCache:
    """OpenAI's automatic prefix cache (see the module's docstring)."""

    clock: Callable[[], float]
    ttl: float = TTL
    minimum: int = MINIMUM
    step: int = STEP
    # per pool (a prompt_cache_key, or None): the remembered prompts and when they expire
    _pools: dict[str | None, list[tuple[list[int], float]]] = field(default_factory=dict)

    def use(self, tokens: Sequence[int], key: str | None = None) -> Use:
        """Bill `tokens`, then remember them."""
        now = self.clock()
        live = [(seen, until) for seen, until in self._pools.get(key, []) if until > now]
        longest = max((common_prefix(seen, tokens) for seen, _ in live), default=0)
        cached = 0
        if longest >= self.minimum:
            cached = self.minimum + (longest - self.minimum) // self.step * self.step
        # A remembered prompt that this one extends is this one's prefix: it goes.
        kept = [(seen, until) for seen, until in live if common_prefix(seen, tokens) < len(seen)]
        self._pools[key] = [*kept, (list(tokens), now + self.ttl)]
        return Use(len(tokens), cached)


@dataclass(frozen=True, slots=True)
class Block:
    """One block of a breakpoint-cached prompt: its tokens, and its mark's TTL in
    seconds when it carries `cache_control`."""

    tokens: Sequence[int]
    ttl: float | None = None


@dataclass
class BreakpointCache:
    """Anthropic's prompt cache (see the module's docstring)."""

    clock: Callable[[], float]
    minimum: int = MINIMUM
    lookback: int = LOOKBACK
    # prefix digest -> (when it expires, its TTL)
    _entries: dict[bytes, tuple[float, float]] = field(default_factory=dict)

    def use(self, blocks: Sequence[Block]) -> Use:
        """Bill a prompt of `blocks`: the longest earlier write found at or up to
        `lookback` boundaries before a mark is read, and each mark's prefix written."""
        now = self.clock()
        self._entries = {k: v for k, v in self._entries.items() if v[0] > now}
        ends: list[int] = []  # tokens up to and including each block
        digests: list[bytes] = []
        running, total = hashlib.blake2b(digest_size=16), 0
        for block in blocks:
            running.update(array("q", block.tokens).tobytes())
            running.update(b"\xff" * 8)  # a boundary: blocks [1, 2] + [3] differ from [1] + [2, 3]
            total += len(block.tokens)
            ends.append(total)
            digests.append(running.copy().digest())
        marks = [i for i, block in enumerate(blocks) if block.ttl is not None]
        read = 0
        for mark in marks:
            for index in range(mark, max(mark - self.lookback, 0) - 1, -1):
                entry = self._entries.get(digests[index])
                if entry is not None and entry[0] > now:
                    read = max(read, ends[index])
                    self._entries[digests[index]] = (now + entry[1], entry[1])
                    break
        written_to = read
        for mark in marks:
            ttl = blocks[mark].ttl
            assert ttl is not None
            if ends[mark] >= self.minimum:
                until = max(now + ttl, self._entries.get(digests[mark], (0.0, ttl))[0])
                self._entries[digests[mark]] = (until, ttl)
                written_to = max(written_to, ends[mark])
        return Use(total, read, written_to - read)


def anthropic_ttl(mark: object) -> float | None:
    """A block's `cache_control` as a TTL in seconds (None: not a breakpoint)."""
    if not isinstance(mark, dict):
        return None
    return 3600.0 if mark.get("ttl") == "1h" else TTL
