"""The test upstream's prompt caches (`tests/prompt_cache.py`) bill what the providers
would: every expected count here is worked out by hand from the prompt's tokens."""

from __future__ import annotations

from tests.clock import Clock
from tests.prompt_cache import AutomaticCache, Block, BreakpointCache, Use, common_prefix
from tests.upstream_messages import prompt_blocks


def tokens(start: int, count: int) -> list[int]:
    """`count` distinct tokens from `start`: two runs share exactly the overlap."""
    return list(range(start, start + count))


def test_common_prefix_counts_the_shared_leading_tokens() -> None:
    base = tokens(0, 3000)
    assert common_prefix(base, base) == 3000
    assert common_prefix(base, [*base[:2500], -1, *base[2501:]]) == 2500
    assert common_prefix(base, base[:10]) == 10
    assert common_prefix([], base) == 0


def test_automatic_reads_a_prefix_in_128_token_steps_from_1024() -> None:
    clock = Clock()
    cache = AutomaticCache(clock)
    first = tokens(0, 1500)
    assert cache.use(first) == Use(1500, 0)  # nothing was there yet
    # 1,500 shared, 300 new: 1,024 + 3 * 128 = 1,408 are billed as cached.
    assert cache.use([*first, *tokens(10_000, 300)]) == Use(1800, 1408)
    # A byte changed at token 1,100 ends the prefix there: 1,100 -> 1,024.
    changed = [*first[:1100], -5, *first[1101:]]
    assert cache.use(changed) == Use(1500, 1024)
    # Under 1,024 shared tokens nothing is cached.
    assert cache.use([*first[:1000], *tokens(20_000, 600)]) == Use(1600, 0)


def test_automatic_forgets_a_prompt_unused_for_its_ttl() -> None:
    clock = Clock()
    cache = AutomaticCache(clock, ttl=300)
    prompt = tokens(0, 2048)
    cache.use(prompt)
    clock.advance(299)
    assert cache.use(prompt).cached == 2048  # used again: kept another 300 s
    clock.advance(299)
    assert cache.use(prompt).cached == 2048
    clock.advance(301)
    assert cache.use(prompt).cached == 0


def test_automatic_keeps_prompt_cache_keys_apart() -> None:
    cache = AutomaticCache(Clock())
    prompt = tokens(0, 2000)
    cache.use(prompt, key="session-a")
    assert cache.use(prompt, key="session-b").cached == 0
    assert cache.use(prompt).cached == 0  # no key is a pool of its own
    assert cache.use(prompt, key="session-a").cached == 1024 + 7 * 128  # 1,920 of 2,000


def test_automatic_still_reads_a_prompt_from_before_a_rewrite() -> None:
    """A compaction rewrites the head; going back to the old prefix still hits while it
    lives (both prompts are remembered)."""
    cache = AutomaticCache(Clock())
    old, new = tokens(0, 4096), tokens(50_000, 4096)
    cache.use(old)
    assert cache.use(new).cached == 0
    assert cache.use([*old, 7]).cached == 4096


def test_breakpoints_write_at_the_mark_then_read_it() -> None:
    clock = Clock()
    cache = BreakpointCache(clock)
    system = Block(tokens(0, 2000), ttl=300)
    turn = Block(tokens(10_000, 50))
    # First request: the 2,000 system tokens are written, the 50 after the mark are input.
    assert cache.use([system, turn]) == Use(2050, cached=0, written=2000)
    # Second: the system is read; the next turn's 80 tokens are plain input.
    assert cache.use([system, Block(tokens(20_000, 80))]) == Use(2080, cached=2000, written=0)


def test_breakpoints_on_the_last_message_read_the_previous_turn_and_write_the_new() -> None:
    """Claude Code's marks: the system and the last message. Each turn reads what the
    previous one wrote and writes only its new messages."""
    cache = BreakpointCache(Clock())
    system = Block(tokens(0, 1500), ttl=300)
    one, two = tokens(10_000, 400), tokens(20_000, 300)
    assert cache.use([system, Block(one, 300)]) == Use(1900, cached=0, written=1900)
    reply = Block(tokens(30_000, 100))
    assert cache.use([system, Block(one), reply, Block(two, 300)]) == Use(
        2300, cached=1900, written=400
    )


def test_breakpoints_look_back_twenty_blocks_and_no_further() -> None:
    cache = BreakpointCache(Clock())
    head = [Block(tokens(0, 1200)), Block(tokens(5000, 10), ttl=300)]
    assert cache.use(head).written == 1210
    unmarked = [Block(head[0].tokens), Block(head[1].tokens)]
    # 20 blocks after the earlier mark: it is the 20th boundary before the new mark.
    near = [*unmarked, *(Block([9000 + n]) for n in range(19)), Block([8000], ttl=300)]
    assert cache.use(near) == Use(1230, cached=1210, written=20)
    # 21 blocks after it (another earlier write is not on the way): nothing is found.
    cache = BreakpointCache(Clock())
    cache.use(head)
    far = [*unmarked, *(Block([9000 + n]) for n in range(20)), Block([8000], ttl=300)]
    assert cache.use(far) == Use(1231, cached=0, written=1231)


def test_breakpoints_a_changed_block_ends_the_read_at_the_mark_before_it() -> None:
    cache = BreakpointCache(Clock())
    tools = Block(tokens(0, 1100), ttl=300)
    system = Block(tokens(2000, 500), ttl=300)
    cache.use([tools, system, Block(tokens(4000, 30))])
    changed = Block([*tokens(2000, 499), -1], ttl=300)  # the system's last token changed
    assert cache.use([tools, changed, Block(tokens(4000, 30))]) == Use(
        1630, cached=1100, written=500
    )


def test_breakpoints_ttl_expires_and_a_read_refreshes_it() -> None:
    clock = Clock()
    cache = BreakpointCache(clock)
    prompt = [Block(tokens(0, 1024), ttl=300), Block([1, 2, 3])]
    cache.use(prompt)
    clock.advance(290)
    assert cache.use(prompt).cached == 1024
    clock.advance(290)  # 580 s after the write, 290 after the read that refreshed it
    assert cache.use(prompt).cached == 1024
    clock.advance(301)
    assert cache.use(prompt) == Use(1027, cached=0, written=1024)
    hour = [Block(tokens(0, 1024), ttl=3600), Block([4])]
    cache.use(hour)
    clock.advance(3000)
    assert cache.use(hour).cached == 1024


def test_breakpoints_cache_nothing_shorter_than_the_minimum() -> None:
    cache = BreakpointCache(Clock())
    short = [Block(tokens(0, 1000), ttl=300), Block([5])]
    assert cache.use(short) == Use(1001, cached=0, written=0)
    assert cache.use(short) == Use(1001, cached=0, written=0)


def characters(text: str) -> list[int]:
    """A tokenizer of one token per character (the test upstream uses o200k)."""
    return [ord(c) for c in text]


def test_a_string_content_is_its_one_text_block() -> None:
    """Anthropic reads `"content": "hi"` as `[{"type": "text", "text": "hi"}]`: the same
    tokens, so a client (or proxy) that writes one form or the other keeps the prefix."""
    plain = {"system": "rules", "messages": [{"role": "user", "content": "hi"}]}
    marked = {
        "system": [{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    assert [b.tokens for b in prompt_blocks(plain, characters)] == [
        b.tokens for b in prompt_blocks(marked, characters)
    ]
    assert [b.ttl for b in prompt_blocks(marked, characters)] == [300.0, None]
