"""A session's money through the engine (`tests/unit/engines.py`): each turn's reported
usage and cost in its plan record, the receipt in its meta, and the summarizer's calls
charged to the session once each, checked against sums done by hand at the cost map's
prices for the model (gpt-4o-mini: $0.15 input, $0.60 output, $0.075 a cache read, per
million tokens)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.costs import Prices, Usage
from tests.unit.engines import MODEL, Parts, conversation, is_summarizer

IN, OUT, READ = 0.15e-6, 0.60e-6, 0.075e-6


def said(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def echo(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": f"echo: {text}"}


async def records(parts: Parts) -> list[dict[str, Any]]:
    return [orjson.loads(record) for record in await parts.store.plans("t1", "s")]


def test_the_model_is_priced_from_the_cost_map(parts: Parts) -> None:
    prices = parts.engine.upstream.models.limits(MODEL).prices
    assert prices == Prices(IN, OUT, READ, IN, "automatic", 300.0)


async def test_each_turn_is_priced_against_resending_with_the_cache(parts: Parts) -> None:
    """Nothing is compressed (the model's whole window): the proxy sends what a resending
    client would, so its saving comes only from what the provider's cache did."""
    reported = {
        "prompt_tokens": 2000,
        "completion_tokens": 20,
        "prompt_tokens_details": {"cached_tokens": 1024},
    }
    parts.upstream.usage = lambda params: reported
    spent = 976 * IN + 1024 * READ + 20 * OUT  # every turn, at its reported usage

    await parts.turn([said("one")])
    parts.wall_clock.advance(60)  # within the cache's TTL
    await parts.turn([said("one"), echo("one"), said("two")])
    parts.wall_clock.advance(301)  # the cache went cold
    await parts.turn([said("one"), echo("one"), said("two"), echo("two"), said("three")])

    first, warm, cold = await records(parts)
    for record in (first, warm, cold):
        assert record["usage"] == {
            "prompt": 2000,
            "cache_read": 1024,
            "cache_write": 0,
            "output": 20,
        }
        assert record["cost"]["spent"] == pytest.approx(spent)
        assert record["cost"]["summaries"] == 0
    # The conversation in the provider's tokens is 2,000 each time (nothing was cut).
    assert first["cost"]["resend"] == pytest.approx(2000 * IN + 20 * OUT)  # nothing cached yet
    # All of it cached, read in 128-token steps beyond 1,024: 1,920 tokens.
    assert warm["cost"]["resend"] == pytest.approx(1920 * READ + 80 * IN + 20 * OUT)
    assert cold["cost"]["resend"] == pytest.approx(2000 * IN + 20 * OUT)
    # Warm, resending would have cost less than what the proxy's request did: said so.
    assert warm["cost"]["net"] == pytest.approx(1920 * READ + 80 * IN - 976 * IN - 1024 * READ)
    assert warm["cost"]["net"] < 0

    meta = await parts.store.load("t1", "s")
    assert meta is not None
    receipt = meta.receipt.shown()
    assert receipt is not None and receipt["turns"] == 3
    assert receipt["spent"] == pytest.approx(3 * spent)
    assert receipt["resend"] == pytest.approx(sum(r["cost"]["resend"] for r in (first, warm, cold)))
    assert receipt["net"] == pytest.approx(receipt["resend"] - receipt["spent"])


async def test_a_summary_made_while_the_turn_waits_is_charged_to_it(make_parts: Any) -> None:
    parts = make_parts(window=1000)
    parts.upstream.usage = lambda params: (
        {"prompt_tokens": 900, "completion_tokens": 100}
        if is_summarizer(params["messages"])
        else {"prompt_tokens": 700, "completion_tokens": 20}
    )
    await parts.turn([*conversation(4), said("and now?")])
    calls = len(parts.upstream.summaries)
    assert calls >= 1
    [record] = await records(parts)
    summaries = calls * (900 * IN + 100 * OUT)
    assert record["compression"] == "summary"
    assert record["cost"]["summaries"] == pytest.approx(summaries)
    assert record["cost"]["spent"] == pytest.approx(700 * IN + 20 * OUT + summaries)
    meta = await parts.store.load("t1", "s")
    assert meta is not None and meta.checkpoint is not None
    assert meta.checkpoint.usage == Usage(900 * calls, 0, 0, 100 * calls)
    assert meta.receipt.summaries == pytest.approx(summaries) and meta.receipt.owed == 0


async def test_every_summary_is_charged_once_whether_made_ahead_or_not(make_parts: Any) -> None:
    """A long conversation turn by turn: summaries made in the background are owed by
    the session until its next turn is charged them; none is lost or counted twice."""
    parts = make_parts(window=2000)
    parts.upstream.usage = lambda params: (
        {"prompt_tokens": 800, "completion_tokens": 50}
        if is_summarizer(params["messages"])
        else {"prompt_tokens": 1500, "completion_tokens": 10}
    )
    history = conversation(12)
    owed_seen = False
    for end in range(1, len(history) + 1, 2):
        await parts.turn(history[:end])
        meta = await parts.store.load("t1", "s")
        assert meta is not None
        owed_seen = owed_seen or meta.receipt.owed > 0
    assert owed_seen  # a summary was made ahead, in the background
    calls = len(parts.upstream.summaries)
    made = calls * (800 * IN + 50 * OUT)
    plans = await records(parts)
    charged = sum(record["cost"]["summaries"] for record in plans)
    meta = await parts.store.load("t1", "s")
    assert meta is not None
    assert charged + meta.receipt.owed == pytest.approx(made)
    assert meta.receipt.summaries == pytest.approx(charged)
    assert meta.receipt.spent == pytest.approx(sum(record["cost"]["spent"] for record in plans))


async def test_a_turn_with_no_reported_usage_has_no_money_figure(parts: Parts) -> None:
    """No usage, no price of it: never a zero that looks measured."""
    await parts.turn([said("one")])
    [record] = await records(parts)
    assert (record["usage"], record["cost"]) == (None, None)
    meta = await parts.store.load("t1", "s")
    assert meta is not None and meta.receipt.shown() is None
