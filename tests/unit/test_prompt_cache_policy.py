"""When a fold pays for the cache rewrite it causes, and the marks a turn adds so the
provider's prompt cache keeps the stable prefix (`proxy.engine.payoff`, `caching`)."""

from __future__ import annotations

import orjson

from proxy.engine.caching import cache_key, marked, marks_in
from proxy.engine.payoff import CacheRates, Prompt, fold_pays, turns_until_forced

ANTHROPIC = CacheRates(read=0.1, write=1.25, output=5.0)  # Claude: cache read 0.1x, write 1.25x
EPHEMERAL = {"type": "ephemeral"}
OPENAI = CacheRates(read=0.25, write=1.0, output=4.0)  # GPT-4.1: cached input 0.25x


def prompt(now: int, folded: int = 80_000, growth: int = 3_000) -> Prompt:
    """An agent's session: 35k of system and tools, a 160k budget."""
    return Prompt(now, folded, 40_000, 160_000, growth, 1_000)


def test_turns_until_forced_counts_whole_turns_left_in_the_budget() -> None:
    assert turns_until_forced(prompt(150_000)) == 3
    assert turns_until_forced(prompt(158_000)) == 0  # the next turn is over the budget


def test_a_warm_claude_prefix_is_never_rewritten_early() -> None:
    """Reads at 0.1x: what a shorter prompt saves until the forced fold (at most ~13
    turns of 40k fewer cached tokens, 53k) never pays a 1.15x rewrite of 40k plus the
    summarizer's call; the fold waits for the budget."""
    assert not any(
        fold_pays(prompt(now), ANTHROPIC, cold=False) for now in range(100_000, 160_001, 2_000)
    )


def test_cheaper_rewrites_pay_in_the_middle_of_the_room() -> None:
    """OpenAI's cached input at 0.25x and free writes: folding pays where many turns are
    left and the shrink is large, not near the budget (few turns left)."""
    assert fold_pays(prompt(120_000), OPENAI, cold=False)
    assert not fold_pays(prompt(155_000), OPENAI, cold=False)
    assert not fold_pays(prompt(85_000), OPENAI, cold=False)  # too small a shrink


def test_cold_cache_folds_whenever_the_prompt_shrinks() -> None:
    assert fold_pays(prompt(100_000), ANTHROPIC, cold=True)
    assert not fold_pays(prompt(80_000), ANTHROPIC, cold=True)  # nothing to gain


def test_a_session_cache_key_is_stable_and_names_no_session() -> None:
    key = cache_key("tenant-a", "session-1")
    assert key == cache_key("tenant-a", "session-1")
    assert key != cache_key("tenant-b", "session-1")
    assert "session-1" not in key and "tenant-a" not in key


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
    out = marked(messages)
    assert orjson.dumps(messages) == before  # nothing changed in place
    assert out[1]["content"] == [
        {"type": "text", "text": messages[1]["content"], "cache_control": EPHEMERAL}
    ]
    assert out[4]["cache_control"] == EPHEMERAL  # a tool result: as a whole
    assert out[0] is messages[0] and out[2] is messages[2] and out[3] is messages[3]


def test_a_list_content_is_marked_on_its_last_block() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    text = {"type": "text", "text": "what is this?"}
    out = marked([{"role": "user", "content": [image, text]}])
    assert out[0]["content"] == [image, text | {"cache_control": EPHEMERAL}]


def test_the_marks_a_body_sets_are_counted_from_its_bytes() -> None:
    assert marks_in(orjson.dumps({"messages": conversation()})) == 0
    assert marks_in(orjson.dumps({"messages": marked(conversation())})) == 2
