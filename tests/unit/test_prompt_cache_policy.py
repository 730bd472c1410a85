"""When a fold pays for the cache rewrite it causes, what it keeps verbatim, and the marks
a turn adds so the provider's prompt cache keeps the stable prefix
(`proxy.engine.planner.payoff`, `caching`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from proxy.engine.planner.caching import cache_key, marked, marks_in, namespaced
from proxy.engine.planner.payoff import (
    SHARES,
    CacheRates,
    Cycle,
    Kept,
    Prompt,
    cycle,
    due,
    fold_due,
    fold_pays,
)

ANTHROPIC = CacheRates(read=0.1, write=1.25, output=5.0)  # Claude: cache read 0.1x, write 1.25x
EPHEMERAL = {"type": "ephemeral"}
OPENAI = CacheRates(read=0.25, write=1.0, output=4.0)  # GPT-4.1: cached input 0.25x


def prompt(now: int, folded: int = 80_000, growth: int = 3_000) -> Prompt:
    """An agent's session: 35k of system and tools, a 160k budget; a fold leaves 80k,
    40k of it byte-identical, and writes a 1k summary."""
    return Prompt(now, folded, 40_000, 160_000, growth, 1_000)


def test_a_fold_pays_once_the_grown_part_was_read_again_for_what_a_fold_costs() -> None:
    """Claude (reads 0.1x, writes 1.25x): a fold costs 40k x 1.15 + 1k x 5 = 51k; a window
    growing 3k a turn has read its grown part for that much once it grew
    sqrt(2 x 3k x 51k / 0.1) = 55.3k: at 135.3k, not at 135k."""
    assert not fold_pays(prompt(135_000), ANTHROPIC, cold=False)
    assert fold_pays(prompt(135_400), ANTHROPIC, cold=False)
    # GPT-4.1 (cached input 0.25x, writes as input): a fold costs 40k x 0.75 + 4k = 34k,
    # paid once the window grew sqrt(2 x 3k x 34k / 0.25) = 28.6k.
    assert not fold_pays(prompt(108_500), OPENAI, cold=False)
    assert fold_pays(prompt(108_600), OPENAI, cold=False)


def test_a_faster_growing_window_folds_later() -> None:
    """A window that grows in big steps reads its grown part again fewer times on the way:
    it grows further before a fold pays."""
    assert fold_pays(prompt(136_000, growth=3_000), ANTHROPIC, cold=False)
    assert not fold_pays(prompt(136_000, growth=6_000), ANTHROPIC, cold=False)


def test_a_fold_is_due_when_the_budget_forces_one_within_two_turns() -> None:
    assert fold_due(prompt(154_001), ANTHROPIC)
    assert not fold_due(prompt(120_000), ANTHROPIC)


def test_cold_cache_folds_whenever_the_prompt_shrinks() -> None:
    assert fold_pays(prompt(100_000), ANTHROPIC, cold=True)
    assert not fold_pays(prompt(80_000), ANTHROPIC, cold=True)  # nothing to gain


# An agent's session as the cost benchmark's: 37k of system, tools and summary, a 160k
# budget, 700 tokens a request, a user turn every three requests, an 8k recall block.
AGENT = Kept(37_000, 160_000, 125_000, 700.0, 1 / 3, 1_024, 8_192)
# A chat app's on a 16k model: a 13k budget, 150 tokens a turn, every request a user's.
CHAT = Kept(1_500, 13_107, 13_000, 150.0, 1.0, 1_024, 8_192)


def test_an_agent_folds_early_and_keeps_the_smallest_window() -> None:
    """Its recall block is capped far below the room, so a larger window only adds what
    every request reads again and every fold writes anew; and rereading the grown part
    of a window from the cache passes what a fold costs long before the budget (the
    rent-or-buy rule: a window growing g tokens a request has read W * W / 2g of its
    grown part by the time it grew W)."""
    chosen = cycle(AGENT, ANTHROPIC)
    assert chosen is not None and chosen.share == SHARES[0]
    start = AGENT.stable + AGENT.summary + chosen.share * AGENT.room
    assert 10_000 < chosen.end - start < 40_000  # sqrt(2 x 700 x ~37k / 0.1) = 22.8k
    # Reads at OpenAI's price (a quarter, not a tenth) make the cycle shorter.
    cheaper = cycle(AGENT, OPENAI)
    assert cheaper is not None and cheaper.end < chosen.end


def test_where_every_turn_asks_the_fold_keeps_the_largest_window() -> None:
    """A chat app on a 16k model whose every message asks: each brings a recall block
    that takes all a fold frees, written anew, uncached, so a smaller window only trades
    verbatim messages the cache holds for recalled ones it does not. The cost keeps half
    the room and folds only at the budget. Where one message in ten asks, a smaller
    window and a shorter cycle cost less; and without recall, less still."""
    assert cycle(CHAT, OPENAI) == Cycle(SHARES[-1], CHAT.budget)
    rarely = cycle(replace(CHAT, users=0.1), OPENAI)
    assert rarely.share == SHARES[0] and rarely.end < CHAT.budget
    alone = cycle(replace(CHAT, recall=0), OPENAI)
    assert alone.share == SHARES[0] and alone.end < rarely.end


def test_a_cycle_holds_at_least_two_requests() -> None:
    """However fast a session grows, the window it keeps leaves room for its next
    requests: a fold is never due again at the very next request."""
    fast = replace(AGENT, growth=20_000.0)
    chosen = cycle(fast, ANTHROPIC)
    assert chosen is not None
    assert AGENT.stable + AGENT.summary + chosen.share * AGENT.room + 20_000 <= chosen.end


def test_a_fold_is_due_when_the_next_request_passes_the_cycle_or_the_budget() -> None:
    chosen = Cycle(0.1, 70_000)
    assert not due(68_000, 1_000, 160_000, chosen)
    assert due(69_500, 1_000, 160_000, chosen)  # passes the cycle's end
    assert due(60_000, 55_000, 160_000, Cycle(0.1, 200_000))  # the budget within two


def test_a_session_cache_key_is_stable_and_names_no_session() -> None:
    key = cache_key(b"secret", "tenant-a", "session-1")
    assert key == cache_key(b"secret", "tenant-a", "session-1")
    assert key != cache_key(b"secret", "tenant-b", "session-1")
    assert key != cache_key(b"another deployment", "tenant-a", "session-1")
    assert key != cache_key(b"secret", "tenant-a", "session-1", own=True)
    assert "session-1" not in key and "tenant-a" not in key


def test_a_clients_own_key_is_its_tenants() -> None:
    body = {"model": "gpt-4.1", "prompt_cache_key": "thread-1"}
    mine = namespaced(body, b"secret", "tenant-a")["prompt_cache_key"]
    assert mine == namespaced(body, b"secret", "tenant-a")["prompt_cache_key"]
    assert mine != namespaced(body, b"secret", "tenant-b")["prompt_cache_key"]
    assert body["prompt_cache_key"] == "thread-1"  # not changed in place
    assert namespaced({"model": "m"}, b"secret", "tenant-a") == {"model": "m"}


def conversation() -> list[dict]:
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "system", "content": "Summary of the conversation so far: …"},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "file contents"},
    ]


def test_marks_go_after_the_system_messages_and_on_the_last_message() -> None:
    messages = conversation()
    before = orjson.dumps(messages)
    out = marked(messages, 0)
    assert orjson.dumps(messages) == before  # nothing changed in place
    assert out[1]["content"] == [
        {"type": "text", "text": messages[1]["content"], "cache_control": EPHEMERAL}
    ]
    assert out[4]["cache_control"] == EPHEMERAL  # a tool result: as a whole
    assert out[0] is messages[0] and out[2] is messages[2] and out[3] is messages[3]


def test_a_list_content_is_marked_on_its_last_block() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    text = {"type": "text", "text": "what is this?"}
    out = marked([{"role": "user", "content": [image, text]}], 0)
    assert out[0]["content"] == [image, text | {"cache_control": EPHEMERAL}]


def test_the_marks_a_body_sets_are_counted_as_its_parser_reads_them() -> None:
    assert marks_in(orjson.dumps({"messages": conversation()})) == 0
    assert marks_in(orjson.dumps({"messages": marked(conversation(), 0)})) == 2
    escaped = (
        rb'{"system":[{"text":"caf\u00e9","cache\u005Fcontrol":{}},{"\u0063ache_control":{}}]}'
    )
    assert marks_in(escaped) == 2
    assert marks_in(rb'{"text":"said \"cache_control\" twice: \"cache_control\""}') == 0


def recalled() -> list[dict]:
    """A window with a recall block inserted ahead of the user's latest message, and the
    tool loop that answers it."""
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hello"},
        {
            "role": "assistant",
            "content": "hi",
            "anthropic_content": [{"type": "text", "text": "hi"}],
        },
        {"role": "system", "content": "Recalled from earlier: …"},
        {"role": "user", "content": "and the logs?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
    ]


def test_the_stable_end_before_recalled_history_is_marked_for_every_client() -> None:
    """The recall block changes every turn: the message before it is marked, on the
    provider's own blocks where it has them, even for a client that marks its own."""
    messages = recalled()
    out = marked(messages, 2)  # Claude Code's two: its system prompt and last message
    assert out[2]["anthropic_content"] == [
        {"type": "text", "text": "hi", "cache_control": EPHEMERAL}
    ]
    assert [i for i, m in enumerate(out) if m is not messages[i]] == [2]
    everything = marked(messages, 0)
    assert [i for i, m in enumerate(everything) if m is not messages[i]] == [0, 2, 6]
    assert marked(messages, 4) == messages  # no room left


def test_where_the_previous_turns_block_began_is_marked_too() -> None:
    """The previous turn's requests wrote the prefix up to its block; a tool loop longer
    than Anthropic's 20-block look-back would lose it, so it is marked where it is."""
    loop = [
        {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{n}"}]}
        if n % 2 == 0
        else {"role": "tool", "tool_call_id": f"c{n - 1}", "content": "out"}
        for n in range(40)
    ]
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "read the files"},
        *loop,
        {"role": "assistant", "content": "done"},
        {"role": "system", "content": "Recalled from earlier: …"},
        {"role": "user", "content": "and the logs?"},
    ]
    out = marked(messages, 2)  # Claude Code's own two
    assert [i for i, m in enumerate(out) if m is not messages[i]] == [2, 44]


def test_a_clients_mark_is_never_replaced() -> None:
    """A mark the client set (its own TTL) stays as it is, and takes no room."""
    hour = {"type": "ephemeral", "ttl": "1h"}
    messages = recalled()
    messages[1] = {
        "role": "user",
        "content": [{"type": "text", "text": "hello", "cache_control": hour}],
    }
    messages[2] = {
        "role": "assistant",
        "content": [{"type": "text", "text": "hi", "cache_control": hour}],
    }
    assert marked(messages, 1)[2] is messages[2]


def test_a_tool_result_before_the_recall_block_is_marked_as_a_whole() -> None:
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        call,
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
        {"role": "system", "content": "Recalled: …"},
        {"role": "user", "content": "next"},
    ]
    out = marked(messages, 3)
    assert out[2]["cache_control"] == EPHEMERAL
    assert [i for i, m in enumerate(out) if m is not messages[i]] == [2]
