"""Money, by hand: each door's usage read into one shape, a call priced at its usage for
each kind of prompt cache, and a turn's net saving against resending the whole
conversation (`proxy.costs`)."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from proxy.costs import Prices, Usage, usage_of
from proxy.costs.prices import cache_style
from proxy.costs.receipts import Receipt, resend_cost, turn_cost

# Round numbers per million tokens, so each figure below can be checked by hand.
PER_M = 1e-6
OPENAI = Prices(input=2 * PER_M, output=8 * PER_M, cache_read=0.5 * PER_M, cache_write=2 * PER_M)
ANTHROPIC = Prices(
    input=3 * PER_M,
    output=15 * PER_M,
    cache_read=0.3 * PER_M,
    cache_write=3.75 * PER_M,
    cache="breakpoints",
)
UNCACHED = Prices(
    input=1 * PER_M, output=2 * PER_M, cache_read=1 * PER_M, cache_write=1 * PER_M, cache="none"
)


def test_chat_usage_counts_cached_tokens_inside_the_prompt() -> None:
    usage = {
        "prompt_tokens": 5000,
        "completion_tokens": 120,
        "prompt_tokens_details": {"cached_tokens": 4096},
    }
    assert usage_of(usage) == Usage(prompt=5000, cache_read=4096, cache_write=0, output=120)


def test_chat_usage_from_litellm_keeps_anthropic_cache_writes() -> None:
    # LiteLLM's chat usage of a Claude call: prompt_tokens counts every input token.
    usage = {
        "prompt_tokens": 9000,
        "completion_tokens": 50,
        "prompt_tokens_details": {"cached_tokens": 6000},
        "cache_read_input_tokens": 6000,
        "cache_creation_input_tokens": 2500,
    }
    assert usage_of(usage) == Usage(prompt=9000, cache_read=6000, cache_write=2500, output=50)


def test_messages_usage_adds_cache_reads_and_writes_to_the_input() -> None:
    # Anthropic's input_tokens leaves out what was read from or written to the cache.
    usage = {
        "input_tokens": 500,
        "cache_read_input_tokens": 6000,
        "cache_creation_input_tokens": 2500,
        "output_tokens": 50,
    }
    assert usage_of(usage) == Usage(prompt=9000, cache_read=6000, cache_write=2500, output=50)


def test_messages_usage_without_a_cache() -> None:
    usage = {"input_tokens": 700, "output_tokens": 9, "cache_read_input_tokens": 0}
    assert usage_of(usage) == Usage(prompt=700, output=9)


def test_responses_usage_counts_cached_tokens_inside_the_input() -> None:
    usage = {
        "input_tokens": 3000,
        "input_tokens_details": {"cached_tokens": 2048},
        "output_tokens": 40,
        "output_tokens_details": {"reasoning_tokens": 10},
        "total_tokens": 3040,
    }
    assert usage_of(usage) == Usage(prompt=3000, cache_read=2048, cache_write=0, output=40)


@pytest.mark.parametrize("data", [None, {}, {"total_tokens": 5}])
def test_no_usage_is_none_not_zero(data: dict[str, int] | None) -> None:
    assert usage_of(data) is None


def test_cost_automatic_cache() -> None:
    # 904 uncached x $2 + 4096 read x $0.5 + 120 out x $8 (per million) = $0.004816
    usage = Usage(prompt=5000, cache_read=4096, output=120)
    assert OPENAI.cost(usage) == pytest.approx(0.001808 + 0.002048 + 0.00096)


def test_cost_breakpoints_cache() -> None:
    # 500 x $3 + 6000 x $0.3 + 2500 x $3.75 + 50 x $15 (per million) = $0.013425
    usage = Usage(prompt=9000, cache_read=6000, cache_write=2500, output=50)
    assert ANTHROPIC.cost(usage) == pytest.approx(0.0015 + 0.0018 + 0.009375 + 0.00075)


def test_cost_no_cache() -> None:
    assert UNCACHED.cost(Usage(prompt=1000, output=100)) == pytest.approx(0.001 + 0.0002)


@pytest.mark.parametrize(
    ("provider_model", "style"),
    [
        ("anthropic/claude-sonnet-4-5", "breakpoints"),
        ("bedrock/us.anthropic.claude-3-5-sonnet-20240620-v1:0", "breakpoints"),
        ("vertex_ai/claude-3-5-sonnet@20240620", "breakpoints"),
        ("claude-3-5-haiku-20241022", "breakpoints"),
        ("openai/gpt-4.1", "automatic"),
        ("gpt-4o-mini", "automatic"),
        ("bedrock/amazon.nova-pro-v1:0", "automatic"),
    ],
)
def test_cache_style_by_provider(provider_model: str, style: str) -> None:
    assert cache_style(provider_model) == style


def test_resend_automatic_reads_the_previous_conversation_within_the_ttl() -> None:
    # 8,064 of 10,000 tokens cached at $0.5, 1,936 new at $2, 100 out at $8 (per million)
    resend = resend_cost(OPENAI, 10_000, 100, 8_064, previous_at=1000.0, now=1299.0)
    assert resend == pytest.approx(0.004032 + 0.003872 + 0.0008)
    # A prefix is read in 128-token steps beyond 1,024: 8,000 tokens read as 7,936.
    stepped = resend_cost(OPENAI, 10_000, 100, 8_000, previous_at=1000.0, now=1299.0)
    assert stepped == pytest.approx(7936 * 0.5 * PER_M + 2064 * 2 * PER_M + 0.0008)


def test_resend_automatic_cold_after_the_ttl() -> None:
    resend = resend_cost(OPENAI, 10_000, 100, 8_000, previous_at=1000.0, now=1301.0)
    assert resend == pytest.approx(0.02 + 0.0008)


def test_resend_automatic_keeps_no_prefix_under_1024_tokens() -> None:
    resend = resend_cost(OPENAI, 1500, 0, 1000, previous_at=0.0, now=1.0)
    assert resend == pytest.approx(1500 * 2 * PER_M)
    kept = resend_cost(OPENAI, 1500, 0, 1024, previous_at=0.0, now=1.0)
    assert kept == pytest.approx(1024 * 0.5 * PER_M + 476 * 2 * PER_M)


def test_resend_breakpoints_writes_what_is_new() -> None:
    # 8,000 read at $0.3, 2,000 written at $3.75, 100 out at $15 (per million)
    resend = resend_cost(ANTHROPIC, 10_000, 100, 8_000, previous_at=0.0, now=10.0)
    assert resend == pytest.approx(0.0024 + 0.0075 + 0.0015)
    first = resend_cost(ANTHROPIC, 10_000, 100, 0, previous_at=None, now=10.0)
    assert first == pytest.approx(0.0375 + 0.0015)


def test_resend_no_cache_pays_every_input_token() -> None:
    assert resend_cost(UNCACHED, 10_000, 0, 8_000, 0.0, 1.0) == pytest.approx(0.01)


def test_turn_cost_is_resend_minus_spent_in_the_providers_tokens() -> None:
    """The proxy sent 2,000 of a 10,000-token conversation (its count); the provider
    counted 2,200 prompt tokens (ratio 1.1), 1,100 of them cached, and 50 out; a summary
    made for it and one owed cost $0.0075. The previous turn's conversation (9,900
    provider tokens) was sent 60 s before."""
    receipt = Receipt(last_tokens=9_900, last_at=940.0, owed=0.001)
    usage = Usage(prompt=2200, cache_read=1100, output=50)
    cost, after = turn_cost(OPENAI, usage, 10_000, 2000, 0.0065, receipt, now=1000.0)
    assert cost is not None
    spent = 1100 * 2 * PER_M + 1100 * 0.5 * PER_M + 50 * 8 * PER_M + 0.0075
    # 11,000 resent, 9,856 of them read (9,900 in 128-token steps beyond 1,024)
    resend = 9_856 * 0.5 * PER_M + 1_144 * 2 * PER_M + 50 * 8 * PER_M
    assert cost.spent == pytest.approx(spent)
    assert cost.summaries == pytest.approx(0.0075)
    assert cost.resend == pytest.approx(resend)
    assert cost.net == pytest.approx(resend - spent)
    assert cost.net < 0  # the summaries cost more than the cache would have: said so
    assert (after.spent, after.summaries, after.resend) == pytest.approx((spent, 0.0075, resend))
    assert (after.turns, after.owed, after.last_tokens, after.last_at) == (1, 0, 11_000, 1000.0)


def test_a_folded_turn_counts_its_conversation_as_the_latest_whole_turn_did() -> None:
    """A whole turn measures the provider's count of the conversation against the
    proxy's (1.2 here); a folded one, whose prompt is mostly system and summary, counts
    unlike the messages it left out (1.0 here): its conversation is scaled by 1.2."""
    whole = Usage(prompt=1_200)
    _, after = turn_cost(OPENAI, whole, 1_000, 1_000, 0.0, Receipt(), now=1.0)
    assert after.ratio == pytest.approx(1.2) and after.last_tokens == 1_200
    folded = Usage(prompt=500)
    _, after = turn_cost(OPENAI, folded, 5_000, 500, 0.0, after, now=2.0)
    assert after.last_tokens == 6_000 and after.ratio == pytest.approx(1.2)
    # A session's first turns folded already (no whole turn yet): this turn's own ratio.
    _, first = turn_cost(OPENAI, folded, 5_000, 500, 0.0, Receipt(), now=2.0)
    assert first.last_tokens == 5_000 and first.ratio is None


def test_a_folded_turn_counts_growth_at_the_rate_whole_turns_grew() -> None:
    """An agent's conversation starts with system and tools the provider counts as the
    proxy does (1,000 as 1,000) and grows by tool outputs it counts higher (2,000 more
    as 3,000 more): a folded turn 4,000 tokens later is the latest whole turn's 4,000
    plus 4,000 at 1.5, not 7,000 scaled by the whole turns' mean ratio (9,333)."""
    _, after = turn_cost(OPENAI, Usage(prompt=1_000), 1_000, 1_000, 0.0, Receipt(), now=1.0)
    _, after = turn_cost(OPENAI, Usage(prompt=4_000), 3_000, 3_000, 0.0, after, now=2.0)
    assert after.whole == (3_000, 4_000) and after.growth == (2_000, 3_000)
    _, folded = turn_cost(OPENAI, Usage(prompt=500), 7_000, 500, 0.0, after, now=3.0)
    assert folded.last_tokens == 10_000
    assert Receipt.from_dict(orjson.loads(orjson.dumps(folded.to_dict()))) == folded
    # Growth too small to measure a rate (a short message's framing): the ratio scales.
    _, short = turn_cost(OPENAI, Usage(prompt=1_100), 1_050, 1_050, 0.0, Receipt(), now=1.0)
    _, short = turn_cost(OPENAI, Usage(prompt=1_300), 1_200, 1_200, 0.0, short, now=2.0)
    _, folded = turn_cost(OPENAI, Usage(prompt=500), 2_400, 500, 0.0, short, now=3.0)
    assert folded.last_tokens == round(2_400 * 1_300 / 1_200)


def test_an_unpriced_turn_has_no_money_figure_and_owes_its_summaries() -> None:
    usage = Usage(prompt=100, output=5)
    cost, after = turn_cost(None, usage, 400, 100, 0.002, Receipt(owed=0.001), now=5.0)
    assert cost is None
    assert after.owed == pytest.approx(0.003)
    assert after == Receipt(owed=after.owed, last_tokens=400, last_at=5.0)
    assert after.shown() is None
    cost, after = turn_cost(OPENAI, None, 400, 100, 0.0, Receipt(), now=5.0)
    assert cost is None and after.turns == 0


def test_receipt_round_trips_and_old_records_load() -> None:
    receipt = Receipt(
        spent=0.5,
        summaries=0.1,
        resend=0.75,
        turns=3,
        owed=0.01,
        last_tokens=9,
        last_at=2.0,
        ratio=1.1,
        whole=(9, 10),
        growth=(4, 5),
    )
    assert Receipt.from_dict(receipt.to_dict()) == receipt
    assert Receipt.from_dict(orjson.loads(orjson.dumps(receipt.to_dict()))) == receipt
    # A receipt stored before growth was measured loads as one without.
    old = {k: v for k, v in receipt.to_dict().items() if k not in ("whole", "growth")}
    assert Receipt.from_dict(old) == replace(receipt, whole=None, growth=(0, 0))
    assert Receipt.from_dict(None) == Receipt()
    assert receipt.shown() == {
        "turns": 3,
        "spent": 0.5,
        "summaries": 0.1,
        "resend": 0.75,
        "net": 0.25,
        "summaries_uncharged": 0.01,
    }
