from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.conversation.tokens import TokenCounter
from proxy.summary.fold import (
    MAX_PINNED_FACTS,
    SummarizationError,
    SummaryResult,
    build_prompt,
    render_transcript,
    summarize_span,
)
from proxy.summary.message import PINNED_LABEL


class WordCounter:
    """One token per whitespace-separated word, two per message of overhead."""

    def count_text(self, text: str) -> int:
        return len(text.split())

    def count_messages(self, messages: list[dict[str, Any]]) -> int:
        return sum(2 + self.count_text(str(m.get("content") or "")) for m in messages)

    def truncate_middle(self, text: str, max_tokens: int, total: int | None = None) -> str:
        return TokenCounter("words", self.count_text).truncate_middle(text, max_tokens, total)


class FakeModel:
    """Records every call; answers with scripted replies or "summary N"."""

    def __init__(self, *replies: object) -> None:
        self.replies = list(replies)
        self.calls: list[tuple[str, list[dict[str, Any]], int]] = []

    async def __call__(self, model: str, messages: list[dict[str, Any]], max_tokens: int) -> str:
        self.calls.append((model, messages, max_tokens))
        reply = self.replies.pop(0) if self.replies else f"summary {len(self.calls)}"
        if isinstance(reply, Exception):
            raise reply
        return reply  # type: ignore[return-value]

    def prompt(self, index: int) -> str:
        return self.calls[index][1][-1]["content"]

    def transcript(self, index: int) -> str:
        """The messages part of a prompt, without the previous summary."""
        return re.split(r"</?(?:new_messages|conversation)>", self.prompt(index))[1]


COUNTER = WordCounter()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def tagged(count: int, words: int = 1, offset: int = 0) -> list[dict[str, Any]]:
    """Messages carrying a unique tag word, padded to `words` words."""
    return [user(" ".join([f"tag{offset + i}x", *["pad"] * (words - 1)])) for i in range(count)]


async def summarize(
    span: list[dict[str, Any]],
    model: FakeModel,
    previous: tuple[str, ...] = (),
    budget: int = 10_000,
    max_summary: int = 200,
    segments: bool = True,
) -> SummaryResult:
    return await summarize_span(
        previous=previous,
        span=span,
        complete=model,
        model="cheap",
        counter=COUNTER,
        budget_tokens=budget,
        max_summary_tokens=max_summary,
        segments=segments,
    )


def calls_with(model: FakeModel, word: str) -> int:
    return sum(word in model.transcript(i).split() for i in range(len(model.calls)))


async def test_single_call_passes_model_and_max_tokens() -> None:
    model = FakeModel("The user greeted the assistant.")
    result = await summarize([user("hello"), {"role": "assistant", "content": "hi"}], model)
    assert model.calls[0][0] == "cheap"
    assert model.calls[0][2] == 200
    assert model.calls[0][1] == build_prompt(None, "user: hello\n\nassistant: hi")
    assert result.text == result.raw_text == "The user greeted the assistant."
    assert (result.calls, result.pinned, result.retention) == (1, [], 1.0)
    assert result.input_tokens == COUNTER.count_messages(model.calls[0][1])


async def test_incremental_sends_previous_summary_and_only_the_new_span() -> None:
    model = FakeModel()
    first = await summarize(tagged(3), model)
    second = await summarize(tagged(2, offset=3), model, previous=first.segments)
    assert first.text.startswith(f"summary 1\n\n{PINNED_LABEL}tag0x")
    assert "<previous_summary>\nsummary 1\n</previous_summary>" in model.prompt(1)
    assert second.raw_text == "summary 2"
    for i in range(5):
        assert calls_with(model, f"tag{i}x") == 1


async def test_a_fold_adds_a_segment_and_leaves_the_earlier_ones_byte_identical() -> None:
    model = FakeModel("The user then paid INV-7.")
    earlier = ("The user greeted the assistant.", "They discussed the budget.")
    result = await summarize([user("I paid INV-7.")], model, previous=earlier, max_summary=200)
    assert result.segments == (*earlier, "The user then paid INV-7.")
    prompt = model.prompt(0)
    assert f"<previous_summary>\n{earlier[0]}\n\n{earlier[1]}\n</previous_summary>" in prompt
    assert "Summarize the new messages only" in prompt
    # The new segment may take what the earlier ones leave of the summary's share.
    assert model.calls[0][2] == 200 - COUNTER.count_text("\n\n".join(earlier))


async def test_segments_that_outgrow_their_share_are_consolidated_into_one() -> None:
    model = FakeModel("All of it, briefly.")
    earlier = (" ".join(["word"] * 80), " ".join(["more"] * 80))  # 160 of 200 tokens
    result = await summarize([user("hi")], model, previous=earlier, max_summary=200)
    assert result.segments == ("All of it, briefly.",)
    assert "Write the updated summary" in model.prompt(0)
    assert model.calls[0][2] == 200


async def test_segments_that_would_crowd_the_summarizer_prompt_are_consolidated() -> None:
    model = FakeModel("Short.")
    earlier = ("Plenty of words here to take half the prompt of a small summarizer.",)
    await summarize([user("hi")], model, previous=earlier, budget=200, max_summary=1000)
    assert "Write the updated summary" in model.prompt(0)


async def test_without_segments_every_fold_rewrites_the_summary() -> None:
    model = FakeModel("Both parts.")
    result = await summarize([user("hi")], model, previous=("One part.",), segments=False)
    assert result.segments == ("Both parts.",)
    assert "Write the updated summary" in model.prompt(0)


@pytest.mark.parametrize(("segments", "budget"), [(True, 400), (False, 150)])
async def test_chunking_keeps_every_call_within_budget_and_folds_forward(
    segments: bool, budget: int
) -> None:
    model = FakeModel()
    result = await summarize(tagged(20, words=30), model, budget=budget, segments=segments)
    assert result.calls == len(model.calls) > 1
    for _, messages, _ in model.calls:
        assert COUNTER.count_messages(messages) <= budget
    for i in range(20):
        assert calls_with(model, f"tag{i}x") == 1
    for i in range(1, len(model.calls)):
        # Each chunk sees what the calls before it wrote: all of it, or the one rewrite.
        earlier = [f"summary {n}" for n in range(1, i + 1)] if segments else [f"summary {i}"]
        expected = "\n\n".join(earlier)
        assert f"<previous_summary>\n{expected}\n</previous_summary>" in model.prompt(i)
    assert result.raw_text == f"summary {len(model.calls)}"
    written = tuple(f"summary {n}" for n in range(1, len(model.calls) + 1))
    assert result.segments == (written if segments else written[-1:])
    assert result.input_tokens == sum(COUNTER.count_messages(m) for _, m, _ in model.calls)


@settings(max_examples=50, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=15),
    budget=st.integers(min_value=160, max_value=600),
)
def test_each_message_in_exactly_one_call_within_budget(sizes: list[int], budget: int) -> None:
    span = [user(" ".join([f"tag{i}x", *["pad"] * (n - 1)])) for i, n in enumerate(sizes)]
    model = FakeModel()
    asyncio.run(summarize(span, model, previous=("earlier",), budget=budget, max_summary=50))
    assert all(COUNTER.count_messages(m) <= budget for _, m, _ in model.calls)
    assert all(calls_with(model, f"tag{i}x") == 1 for i in range(len(span)))


async def test_giant_message_is_cut_with_marker() -> None:
    model = FakeModel()
    words = " ".join(f"w{i}" for i in range(1000))
    await summarize([user(words)], model, budget=150)
    assert len(model.calls) == 1
    assert COUNTER.count_messages(model.calls[0][1]) <= 150
    assert "tokens omitted …]" in model.prompt(0)
    assert "w0" in model.prompt(0).split() and "w999" in model.prompt(0).split()


async def test_budget_without_room_for_messages_fails() -> None:
    with pytest.raises(SummarizationError):
        await summarize(tagged(1), FakeModel(), budget=20)


@pytest.mark.parametrize(
    "reply",
    [
        RuntimeError("upstream down"),
        "",
        "   \n",
        "Summary:  ",
        None,
        "Error: rate limit exceeded",
        '{"error": {"message": "bad request"}}',
        "I'm sorry, but I can't help with that.",
    ],
)
async def test_failures_raise_summarization_error(reply: object) -> None:
    with pytest.raises(SummarizationError):
        await summarize(tagged(2), FakeModel(reply))


async def test_failure_in_a_later_chunk_raises() -> None:
    with pytest.raises(SummarizationError):
        await summarize(tagged(20, words=30), FakeModel("ok so far", ""), budget=150)


@pytest.mark.parametrize("reply", ["Summary: The user said hi.", "**Summary:**\nThe user said hi."])
async def test_strips_summary_label_and_whitespace(reply: str) -> None:
    result = await summarize([user("hi")], FakeModel(f"  {reply}  \n"))
    assert result.text == "The user said hi."


async def test_cuts_a_model_running_on_into_the_prompt_markup() -> None:
    reply = "The user said hi.\n</previous_summary>\n<new_messages>\nuser: hi"
    result = await summarize([user("hi")], FakeModel(reply))
    assert result.text == "The user said hi."
    with pytest.raises(SummarizationError):  # nothing but echoed markup is no summary
        await summarize([user("hi")], FakeModel("<new_messages>\nuser: hi"))


async def test_pins_dropped_facts_only() -> None:
    span = [user("Please pay invoice INV-2024-001 for Maria Gonzalez today.")]
    result = await summarize(span, FakeModel("Maria Gonzalez asked for a payment."))
    assert result.pinned == ["INV-2024-001"]
    assert result.retention == 0.5
    assert result.raw_text == "Maria Gonzalez asked for a payment."
    assert result.text == f"{result.raw_text}\n\n{PINNED_LABEL}INV-2024-001"


async def test_facts_of_previous_summary_are_checked_too() -> None:
    previous = ("The budget is $4,200.",)
    model = FakeModel("The user agreed.")
    rewritten = await summarize([user("ok")], model, previous=previous, segments=False)
    assert rewritten.pinned == ["$4,200"]  # the rewrite dropped it
    added = await summarize([user("ok")], FakeModel("The user agreed."), previous=previous)
    assert added.pinned == [] and "$4,200" in added.text  # its segment still says it


async def test_nothing_pinned_when_all_facts_kept() -> None:
    span = [user("Ship version v1.2.3 to /srv/app on 2024-03-15.")]
    result = await summarize(span, FakeModel("v1.2.3 ships to /srv/app on 2024-03-15."))
    assert (result.pinned, result.retention) == ([], 1.0)
    assert PINNED_LABEL not in result.text


async def test_pinned_facts_are_capped_keeping_the_most_recent() -> None:
    span = tagged(MAX_PINNED_FACTS + 10)  # every tag is an identifier fact
    result = await summarize(span, FakeModel("Nothing."), max_summary=10_000)
    assert result.pinned == [f"tag{i}x" for i in range(10, MAX_PINNED_FACTS + 10)]
    small = await summarize(span, FakeModel("Nothing."), max_summary=40)
    assert small.pinned == [f"tag{i}x" for i in range(MAX_PINNED_FACTS + 6, MAX_PINNED_FACTS + 10)]


def test_render_transcript_covers_tools_parts_and_names() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "name": "alice",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:..."}},
            ],
        },
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'},
        {"role": "assistant", "content": None},
    ]
    assert render_transcript(messages) == (
        "system: Be brief.\n\n"
        "user (alice): What is this?\n[image]\n\n"
        "assistant: Checking.\n"
        'assistant called tool get_weather({"city": "Paris"})\n\n'
        'tool result (get_weather): {"temp_c": 21}\n\n'
        "assistant: (empty)"
    )


async def test_empty_span_is_a_caller_error() -> None:
    with pytest.raises(ValueError):
        await summarize([], FakeModel())


async def test_pinned_cap_skips_a_fact_too_big_for_the_budget() -> None:
    span = [user("Use tag1x with Bank of America Merrill Lynch.")]
    result = await summarize(span, FakeModel("Nothing."), max_summary=16)  # 4 pinned tokens
    assert result.pinned == ["tag1x"]


async def test_a_summary_over_its_cap_is_cut_to_it_at_a_sentence_end() -> None:
    """A summarizer that ignores max_tokens (the issue saw 59k tokens against 1,024): the
    summary stored is within the cap, ending where a sentence does."""
    sentences = " ".join(f"Fact number {i} holds." for i in range(2000))  # 8,000 words
    model = FakeModel(sentences)
    result = await summarize_span(
        span=[user("a b c")],
        complete=model,
        model="m",
        counter=COUNTER,
        budget_tokens=500,
        max_summary_tokens=100,
    )
    [summary] = result.segments
    assert COUNTER.count_text(summary) <= 100
    assert summary.startswith("Fact number 0 holds.") and summary.endswith("holds.")
    assert COUNTER.count_text(summary) > 90  # cut at the cap, not far before it


class LongestCounted(WordCounter):
    """Counts as `WordCounter` does, keeping the longest text it was given."""

    def __init__(self) -> None:
        self.longest = 0

    def count_text(self, text: str) -> int:
        self.longest = max(self.longest, len(text))
        return super().count_text(text)


async def test_a_flood_of_a_reply_is_cut_to_its_cap_before_it_is_read() -> None:
    """A summarizer's reply of megabytes (a provider flooding, one ignoring max_tokens):
    cut to what its cap could hold before it is searched or counted, then to the cap,
    so no pass over it all holds the event loop."""
    flood = "Fact number 7 holds. " * 250_000  # 5.2 MB
    counter = LongestCounted()
    result = await summarize_span(
        span=[user("a b c")],
        complete=FakeModel(flood),
        model="m",
        counter=counter,
        budget_tokens=500,
        max_summary_tokens=100,
    )
    [summary] = result.segments
    assert 90 < counter.count_text(summary) <= 100 and summary.endswith("holds.")
    assert counter.longest <= 100 * 16  # never the flood: at most 16 characters a token
