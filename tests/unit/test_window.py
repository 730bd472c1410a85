from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from proxy.conversation.tokens import TokenCounter, counter_for_model
from proxy.engine.planner.window import (
    Plan,
    omitted_message,
    plan_context,
)
from proxy.errors import ContextOverflow
from proxy.summary.message import summary_message

CHAR = counter_for_model("local-model", "char")
WORDS = (
    "The quick brown fox jumps over the lazy dog; 東京は日本の首都です。 def f(x): return x * 2\n"
)


def text(size: int, seed: int = 0) -> str:
    """Deterministic filler text of `size` characters."""
    return (WORDS[seed % len(WORDS) :] + WORDS * (size // len(WORDS) + 2))[:size]


def user(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def tool_unit(call_ids: list[str], arguments: str, results: list[str]) -> list[dict[str, Any]]:
    """An assistant message with tool calls followed by one result per call."""
    calls = [
        {"id": i, "type": "function", "function": {"name": "lookup", "arguments": arguments}}
        for i in call_ids
    ]
    call = {"role": "assistant", "content": None, "tool_calls": calls}
    return [call] + [
        {"role": "tool", "tool_call_id": i, "content": r}
        for i, r in zip(call_ids, results, strict=True)
    ]


def plan(transcript: list[dict[str, Any]], counter: TokenCounter = CHAR, **kwargs: Any) -> Plan:
    kwargs.setdefault("system", [{"role": "system", "content": "You are helpful."}])
    kwargs.setdefault("summary", None)
    kwargs.setdefault("summary_covers", 0)
    return plan_context(
        transcript=transcript,
        transcript_tokens=[counter.count_message(m) for m in transcript],
        counter=counter,
        **kwargs,
    )


# --- examples -------------------------------------------------------------------------------


def test_everything_fits_so_everything_is_sent() -> None:
    transcript = [user("hi"), assistant("hello"), user("how are you?")]
    result = plan(transcript, budget=1000)
    assert result.messages[1:] == transcript
    assert (result.compression, result.summarize, result.dropped) == ("none", None, 0)
    assert result.tokens == CHAR.count_messages(result.messages)


def test_too_long_asks_for_a_summary_in_one_big_step_then_fits() -> None:
    transcript = []
    for i in range(20):
        transcript += [user(text(200, i)), assistant(text(200, i + 1))]
    transcript.append(user("and now?"))
    budget = 1000

    first = plan(transcript, budget=budget)
    assert first.messages == [] and first.summarize is not None
    start, split = first.summarize
    assert start == 0 and transcript[split]["role"] != "tool"  # a unit boundary
    recent = sum(map(CHAR.count_message, transcript[split:]))
    assert recent <= 0.5 * budget < recent + CHAR.count_message(transcript[split - 1])

    second = plan(transcript, budget=budget, summary="They chatted.", summary_covers=split)
    assert second.compression == "summary" and second.summarize is None
    assert second.messages[1] == summary_message("They chatted.")
    assert second.messages[2:] == transcript[split:]
    assert second.tokens <= budget


def test_the_verbatim_share_is_of_what_system_and_tools_leave() -> None:
    """An agent's system prompt and tools are most of the budget: the summary's split
    leaves half of the rest verbatim, so summary plus recent messages fit beside them."""
    transcript = []
    for i in range(20):
        transcript += [user(text(100, i)), assistant(text(100, i + 1))]
    transcript.append(user("and now?"))
    system = [{"role": "system", "content": text(2500)}]
    budget, tools = 2000, 700
    base = CHAR.count_messages(system) + tools
    first = plan(transcript, budget=budget, system=system, tools_tokens=tools)
    assert first.summarize is not None
    _, split = first.summarize
    recent = sum(map(CHAR.count_message, transcript[split:]))
    assert recent <= 0.5 * (budget - base) < recent + CHAR.count_message(transcript[split - 1])
    second = plan(
        transcript,
        budget=budget,
        system=system,
        tools_tokens=tools,
        summary="S",
        summary_covers=split,
    )
    assert second.compression == "summary" and second.tokens <= budget


def test_the_agent_context_of_the_first_message_rides_with_the_summary() -> None:
    """Claude Code's `<system-reminder>` blocks (CLAUDE.md, the date) came in the first
    user message; once it is summarized they stand before the summary, counted."""
    kept = ("<system-reminder>Use tabs, not spaces.</system-reminder>",)
    transcript = [user(text(300, i)) for i in range(6)]
    result = plan(transcript, budget=2000, summary="They chatted.", summary_covers=4, kept=kept)
    head = result.messages[1]
    assert head == summary_message("They chatted.", kept)
    assert head["content"].startswith(kept[0]) and "They chatted." in head["content"]
    assert result.tokens == CHAR.count_messages(result.messages)
    assert plan(transcript, budget=2000, kept=kept).messages[1:] == transcript  # no summary


def test_without_summary_the_oldest_units_are_dropped_with_a_marker() -> None:
    transcript = [user(text(400)), assistant(text(400)), user(text(400)), user("last")]
    result = plan(transcript, budget=60, allow_summary=False)
    assert result.compression == "truncated"
    assert result.dropped == 3
    assert result.messages[1] == omitted_message(3)
    assert result.messages[2:] == [user("last")]


def test_a_giant_tool_result_in_the_last_turn_is_cut_in_the_middle() -> None:
    transcript = [
        user("hi"),
        assistant("hello"),
        user("read the file"),
        *tool_unit(["call_1"], '{"path": "big.txt"}', ["HEAD " + text(50_000) + " TAIL"]),
    ]
    first = plan(transcript, budget=2000)
    assert first.summarize == (0, 2)  # everything before the last user turn

    result = plan(transcript, budget=2000, summary="Greetings.", summary_covers=2)
    assert result.compression == "truncated" and result.tokens <= 2000
    assert result.messages[1:4] == [summary_message("Greetings."), *transcript[2:4]]
    cut = result.messages[4]
    assert cut["tool_call_id"] == "call_1" and "tokens omitted …]" in cut["content"]
    assert cut["content"].startswith("HEAD") and cut["content"].endswith("TAIL")


def test_tool_call_units_are_never_split() -> None:
    transcript = [
        user("weather in Paris and Rome?"),
        *tool_unit(["a", "b"], "{}", [text(300), text(300)]),
        assistant(text(100)),
        user("thanks"),
    ]
    for budget in range(60, 700, 10):
        result = plan(transcript, budget=budget, allow_summary=False)
        roles = [m["role"] for m in result.messages]
        assert roles.count("tool") in (0, 2)
        assert ("tool" in roles) == any("tool_calls" in m for m in result.messages)


def test_orphan_tool_result_at_the_start_is_dropped_visibly() -> None:
    transcript = [{"role": "tool", "tool_call_id": "x", "content": "stale"}, user("hi")]
    result = plan(transcript, budget=1000)
    assert result.messages[1:] == [omitted_message(1), user("hi")]
    assert (result.compression, result.dropped) == ("truncated", 1)


def test_system_messages_alone_over_budget_raise() -> None:
    with pytest.raises(ContextOverflow):
        plan([user("hi")], budget=100, system=[{"role": "system", "content": text(2000)}])
    with pytest.raises(ContextOverflow):
        plan([user("hi")], budget=100, tools_tokens=200)


def test_inputs_are_not_mutated_and_only_cut_messages_are_copies() -> None:
    """The history is passed on, not copied (a copy of it per request is a Python walk
    over the whole history); a message that must be cut is a new object."""
    transcript = [user("hi"), *tool_unit(["a"], "{}", [text(5000)])]
    before = copy.deepcopy(transcript)
    result = plan(transcript, budget=500)
    assert transcript == before
    assert result.messages[1] is transcript[0]
    assert result.messages[-1] is not transcript[-1]
    assert result.messages[-1]["content"] != transcript[-1]["content"]


# --- properties -----------------------------------------------------------------------------

sizes = st.one_of(st.integers(0, 300), st.integers(0, 300), st.integers(1000, 12_000))


@dataclass
class Case:
    system: list[dict[str, Any]]
    transcript: list[dict[str, Any]]
    summary: str | None
    summary_covers: int
    budget: int
    tools_tokens: int
    ratio: float
    allow_summary: bool
    counter: TokenCounter

    def run(self, **changes: Any) -> Plan:
        args: dict[str, Any] = {
            "system": self.system,
            "transcript": self.transcript,
            "transcript_tokens": [self.counter.count_message(m) for m in self.transcript],
            "summary": self.summary,
            "summary_covers": self.summary_covers,
            "budget": self.budget,
            "counter": self.counter,
            "tools_tokens": self.tools_tokens,
            "keep_recent_ratio": self.ratio,
            "allow_summary": self.allow_summary,
        }
        return plan_context(**(args | changes))


@st.composite
def cases(draw: st.DrawFn) -> Case:
    counter = draw(st.sampled_from([CHAR, counter_for_model("gpt-4o")]))
    ids = iter(range(10_000))

    def unit(kind: str) -> list[dict[str, Any]]:
        if kind == "user":
            return [user(text(draw(sizes), draw(st.integers(0, 50))))]
        if kind == "assistant":
            return [assistant(text(draw(sizes)))]
        call_ids = [f"call_{next(ids)}" for _ in range(draw(st.integers(1, 3)))]
        results = [text(draw(sizes)) for _ in call_ids]
        return tool_unit(call_ids, text(draw(st.integers(0, 200))), results)

    kinds = st.sampled_from(["user", "assistant", "tools"])
    transcript: list[dict[str, Any]] = []
    for kind in draw(st.lists(kinds, max_size=12)):
        transcript += unit(kind)
    last_user = len(transcript)
    transcript += unit("user")
    for _ in range(draw(st.integers(0, 2))):
        transcript += unit("tools")

    boundaries = [i for i, m in enumerate(transcript[: last_user + 1]) if m["role"] != "tool"]
    summary, covers = None, 0
    if draw(st.booleans()):
        summary = text(draw(st.integers(0, 400)), 7)
        covers = draw(st.sampled_from([0, *boundaries]))
    system = [{"role": "system", "content": text(draw(st.integers(1, 200)), 3)}]
    system *= draw(st.integers(0, 2))
    total = counter.count_messages(system + transcript) + 50
    return Case(
        system=system,
        transcript=transcript,
        summary=summary,
        summary_covers=covers,
        budget=draw(st.integers(50, max(100, int(total * 1.2)))),
        tools_tokens=draw(st.sampled_from([0, 0, 40])),
        ratio=draw(st.sampled_from([0.3, 0.5, 0.7])),
        allow_summary=draw(st.booleans()),
        counter=counter,
    )


def _is_cut(original: dict[str, Any], got: dict[str, Any]) -> bool:
    """`got` is `original` with some text shortened to a head/tail plus marker (or emptied)."""
    if {k: v for k, v in got.items() if k not in ("content", "tool_calls")} != {
        k: v for k, v in original.items() if k not in ("content", "tool_calls")
    }:
        return False
    texts = [got.get("content")] + [c["function"]["arguments"] for c in got.get("tool_calls", [])]
    return any(t == "" or (t and "tokens omitted …]" in t) for t in texts)


def check_sendable(case: Case, result: Plan) -> None:
    counter, system, transcript = case.counter, case.system, case.transcript
    assert result.summarize is None
    assert result.tokens == counter.count_messages(result.messages) + case.tools_tokens
    assert result.tokens <= case.budget
    messages = result.messages
    assert messages[: len(system)] == system
    at, cut = len(system), False
    covers = case.summary_covers if case.summary is not None else 0
    if case.summary is not None:
        expected = summary_message(case.summary)
        cut = messages[at] != expected
        assert not cut or _is_cut(expected, messages[at])
        at += 1
    if result.dropped:
        assert messages[at] == omitted_message(result.dropped)
        at += 1
    start = covers + result.dropped
    rest = messages[at:]
    assert len(rest) == len(transcript) - start  # a contiguous suffix, in order
    for original, got in zip(transcript[start:], rest, strict=True):
        if got != original:
            assert _is_cut(original, got)
            cut = True
            event("message cut")
    assert not rest or rest[0]["role"] != "tool"
    called = [c["id"] for m in rest for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in rest if m["role"] == "tool"]
    assert called == answered  # no orphan call or result
    last_user = max(i for i, m in enumerate(transcript) if m["role"] == "user")
    assert start <= last_user  # the last user turn is always there
    if result.dropped or cut:
        assert result.compression == "truncated"
    else:
        assert result.compression == ("summary" if case.summary is not None else "none")


def run(case: Case) -> Plan | None:
    try:
        return case.run()
    except ContextOverflow:
        # only when not even the bare last turn (texts emptied) plus a marker fits
        last_user = max(i for i, m in enumerate(case.transcript) if m["role"] == "user")
        bare = [_emptied(m) for m in case.transcript[last_user:]]
        needed = case.counter.count_messages(case.system + bare) + case.tools_tokens
        assert case.budget < needed + 30
        event("overflow")
        return None


def _emptied(message: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(message) | {"content": "" if message["content"] is not None else None}
    for call in result.get("tool_calls", []):
        call["function"]["arguments"] = ""
    return result


@settings(max_examples=200, deadline=None)
@given(cases())
def test_plan_properties(case: Case) -> None:
    before = copy.deepcopy(case.transcript)
    result = run(case)
    if result is None:
        return
    assert case.transcript == before
    covers = case.summary_covers if case.summary is not None else 0
    full = case.counter.count_messages(case.system + case.transcript) + case.tools_tokens
    if case.summary is None and full <= case.budget:
        assert result.messages == case.system + case.transcript
    if result.summarize is None:
        event(f"sent: {result.compression}")
        check_sendable(case, result)
        return
    event("summarize")

    assert case.allow_summary and result.messages == []
    start, split = result.summarize
    assert start == covers < split and case.transcript[split]["role"] != "tool"
    last_user = max(i for i, m in enumerate(case.transcript) if m["role"] == "user")
    assert split <= last_user
    tokens = [case.counter.count_message(m) for m in case.transcript]
    base = case.counter.count_messages(case.system) + case.tools_tokens
    limit = case.ratio * (case.budget - base)  # of what can be compressed
    assert sum(tokens[split:]) <= limit or split == last_user
    for s in range(start + 1, split):  # smallest such split: no earlier boundary qualifies
        if case.transcript[s]["role"] != "tool":
            assert sum(tokens[s:]) > limit

    summarized = Case(**(vars(case) | {"summary": text(300, 5), "summary_covers": split}))
    second = run(summarized)
    if second is not None:
        check_sendable(summarized, second)
