"""A fold asked of the session's last prompt as its next turn
(`proxy.engine.folds.continuing`, `proxy.summary.fold.continuation_task`): when it pays,
what it sends, and that it leaves the fold to the summarizer's own prompt otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.costs import Prices, Usage
from proxy.engine.folds.continuing import Prompt, appended, held, pays
from proxy.engine.types import Sent
from proxy.summary.fold import (
    APPEND_TASK,
    CONTINUATION_TASK,
    SYSTEM_PROMPT,
    continuation_task,
    summarize_span,
)
from tests.unit.engines import SUMMARY, Parts, build, conversation, settings
from tests.unit.test_summarize import COUNTER, FakeModel, tagged

CLAUDE = Prices(3e-6, 15e-6, 0.3e-6, 3.75e-6, "breakpoints", 300.0)
GPT = Prices(2e-6, 8e-6, 0.5e-6, 2e-6, "automatic", 300.0)


def prompt(usage: Usage, at: float = 0.0) -> Prompt:
    sent = Sent("chat", {"model": "m", "messages": []})
    return Prompt(sent, "m", 0, 10, "head", None, at, usage, usage.prompt, None, 0)


def test_what_the_cache_holds_of_a_prompt() -> None:
    """Anthropic's: up to its last breakpoint, read or written; OpenAI's: every prefix of
    1,024 tokens or more, in 128-token steps; none without a cache."""
    assert held(Usage(50_000, cache_read=40_000, cache_write=9_000), CLAUDE) == 49_000
    assert held(Usage(50_000), CLAUDE) == 0
    assert held(Usage(1_500), GPT) == 1_024 + 3 * 128
    assert held(Usage(1_000), GPT) == 0
    assert held(Usage(50_000), Prices(1e-6, 1e-6, 1e-6, 1e-6, "none")) == 0


def test_continuing_pays_where_the_cache_holds_the_prompt_and_is_warm() -> None:
    big = prompt(Usage(120_000, cache_read=110_000, cache_write=9_000))
    assert pays(big, CLAUDE, apart=40_000, now=10.0)  # 12k of input-priced reads < 40k
    assert not pays(big, CLAUDE, apart=40_000, now=301.0)  # the cache went cold
    assert not pays(big, CLAUDE, apart=5_000, now=10.0)  # a small span is cheaper apart
    uncached = prompt(Usage(120_000))
    assert not pays(uncached, CLAUDE, apart=40_000, now=10.0)  # it would be read in full
    chat = prompt(Usage(12_000, cache_read=11_000))
    assert pays(chat, GPT, apart=6_000, now=10.0)
    assert not pays(chat, Prices(2e-6, 8e-6, 2e-6, 2e-6, "none"), apart=6_000, now=10.0)


def test_an_item_appended_to_a_json_array() -> None:
    item = orjson.dumps({"role": "user", "content": "x"})
    assert orjson.loads(appended(b"[]", item)) == [{"role": "user", "content": "x"}]
    assert orjson.loads(appended(memoryview(b"[1,2]"), item)) == [1, 2, orjson.loads(item)]
    assert appended(b"[1]", b"2") == b"[1,2]"


def test_the_task_quotes_where_the_span_ends_and_keeps_the_summarizers_rules() -> None:
    span = [
        {"role": "user", "content": "Deploy to eu-west-3 on Friday"},
        {"role": "assistant", "content": "x " * 400},
    ]
    task = continuation_task(span, append=True)
    assert task.startswith(CONTINUATION_TASK)
    assert SYSTEM_PROMPT.split(". ", 1)[1] in task  # the same rules as a fold apart
    assert "after the summary above" in task and task.endswith(APPEND_TASK)
    quoted = task.split("<last_message>\n")[1].split("\n</last_message>")[0]
    assert quoted.startswith("assistant: x x") and quoted.endswith(" …") and len(quoted) < 320
    first = continuation_task(span[:1], append=False)
    assert "from its start" in first and "Deploy to eu-west-3 on Friday" in first


class Continued:
    """A continuation that records its tasks and answers `replies` in turn."""

    def __init__(self, *replies: object) -> None:
        self.replies, self.tasks = list(replies), []  # type: ignore[var-annotated]

    async def __call__(self, task: str, max_tokens: int) -> tuple[str, int]:
        self.tasks.append((task, max_tokens))
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return str(reply), 5_000


async def fold(
    continued: Continued, model: FakeModel, previous: tuple[str, ...] = ()
) -> tuple[str, ...]:
    result = await summarize_span(
        previous=previous,
        span=tagged(4, words=5),
        complete=model,
        model="m",
        counter=COUNTER,
        budget_tokens=10_000,
        max_summary_tokens=200,
        continuation=continued,
    )
    return result.segments


async def test_a_continued_fold_adds_its_segment_with_one_call_and_no_apart_call() -> None:
    continued, model = Continued("They tagged four messages."), FakeModel()
    assert await fold(continued, model, ("Earlier part.",)) == (
        "Earlier part.",
        "They tagged four messages.",
    )
    [(task, cap)] = continued.tasks
    assert model.calls == [] and task.endswith(APPEND_TASK) and cap == 200 - 2


@pytest.mark.parametrize("failure", [RuntimeError("upstream down"), "", "Error: 500 overloaded"])
async def test_a_continuation_that_fails_leaves_the_fold_to_the_summarizers_prompt(
    failure: object,
) -> None:
    continued, model = Continued(failure), FakeModel("Apart.")
    assert await fold(continued, model) == ("Apart.",)
    assert len(continued.tasks) == 1 and len(model.calls) == 1
    assert model.calls[0][1][0]["content"] == SYSTEM_PROMPT


async def test_segments_to_consolidate_are_rewritten_apart() -> None:
    """The continuation adds a segment; where the segments must be merged into one, the
    summarizer's own prompt rewrites them."""
    crowded = ("word " * 180,)
    continued, model = Continued("unused"), FakeModel("Merged.")
    assert await fold(continued, model, crowded) == ("Merged.",)
    assert continued.tasks == [] and len(model.calls) == 1


def cached(params: dict[str, Any]) -> dict[str, Any]:
    """A provider's usage for a turn whose prompt was cached but its last 50 tokens."""
    return {
        "prompt_tokens": 1_500,
        "completion_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 1_450},
    }


def cheap_reads(tmp_path: Path, summary_model: str | None = None) -> Parts:
    """An engine on a 4,000-token window (a 3,200-token budget) of a model whose cache
    reads cost a tenth of its input (GPT-5's, Claude's), optionally summarized by another
    model."""
    config = settings(window=4000, context={"summary_model": summary_model})
    entry = config.model_list[0]
    info = entry.model_info | {"cache_read_input_token_cost": 0.015e-6}
    models = [entry.model_copy(update={"model_info": info})]
    if summary_model is not None:
        models.append(models[0].model_copy(update={"model_name": summary_model}))
    parts = build(str(tmp_path), config.model_copy(update={"model_list": models}))
    parts.upstream.usage = cached
    return parts


async def turn_by_turn(parts: Parts) -> None:
    history = conversation(12)
    try:
        for end in range(1, len(history) + 1, 2):
            await parts.turn(history[:end])
    finally:
        await parts.close()


async def test_a_fold_made_ahead_continues_the_prompt_the_turn_just_sent(tmp_path: Path) -> None:
    """The engine, turn by turn on a small window whose cache holds each prompt: the
    summary made ahead after a turn is asked as that turn's prompt, byte for byte, plus
    the task; the summary lands as the session's, and later turns send it."""
    parts = cheap_reads(tmp_path)
    await turn_by_turn(parts)
    continuations = [s for s in parts.upstream.summaries if s[0]["content"] != SYSTEM_PROMPT]
    assert continuations, "no fold continued a prompt"
    sent = [params["messages"] for params in parts.upstream.sent]
    for summary in continuations:
        assert summary[-1]["content"].startswith(CONTINUATION_TASK)
        assert summary[:-1] in sent  # a prompt a turn sent, unchanged
    summaries = [m for p in parts.upstream.sent for m in p["messages"] if SUMMARY in str(m)]
    assert summaries  # the continued summaries were the session's, sent by later turns


async def test_without_a_cache_report_every_fold_is_made_apart(tmp_path: Path) -> None:
    """No usage said what the provider cached: nothing tells a continuation would pay."""
    parts = cheap_reads(tmp_path)
    parts.upstream.usage = lambda params: None
    await turn_by_turn(parts)
    assert parts.upstream.summaries
    assert all(s[0]["content"] == SYSTEM_PROMPT for s in parts.upstream.summaries)


async def test_another_summary_model_folds_apart(tmp_path: Path) -> None:
    parts = cheap_reads(tmp_path, summary_model="summarizer")
    await turn_by_turn(parts)
    assert parts.upstream.summaries
    assert all(s[0]["content"] == SYSTEM_PROMPT for s in parts.upstream.summaries)


async def test_a_continuation_past_the_budget_is_folded_apart(tmp_path: Path) -> None:
    """Every request the proxy sends stays within the budget, counted as the planner counts
    every request (its tokenizer, against the budget the session's calibration leaves):
    a last prompt that fits, but with the task appended would not, is folded apart."""
    parts = cheap_reads(tmp_path)
    history = conversation(2)
    pasted = " ".join(f"p{i}" for i in range(500))  # the prompt fits; with the task, not
    history += [{"role": "user", "content": pasted}, {"role": "assistant", "content": "ok"}]
    try:
        for end in range(1, len(history) + 1, 2):
            await parts.turn(history[:end])
    finally:
        await parts.close()
    assert parts.upstream.summaries
    assert all(s[0]["content"] == SYSTEM_PROMPT for s in parts.upstream.summaries)
