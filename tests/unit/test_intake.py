"""A request's facts (`proxy.engine.intake.Intake`), worked out once per request by the
real engine's intake (`tests/unit/engines.py`): its budget (80% of the model's input
limit by default, less the output it asks room for, divided by the session's
calibration), its system prompt and tools counted apart from the conversation, what it
adds for the provider's prompt cache, and what a request with no session sends:
the body as it came when its bytes alone show it fits, else the conversation cut to
the budget."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from proxy.config.settings import Settings
from proxy.conversation.tokens import BOUND, TokenCounter
from proxy.engine.planner.reconcile import Match
from proxy.engine.types import Request, RequestContext, SessionView
from proxy.errors import InvalidRequest
from proxy.sessions.records import SessionMeta
from tests.unit.engines import MODEL, Parts, build

Message = dict[str, Any]
SYSTEM = {"role": "system", "content": "You are a careful assistant."}
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


def said(text: str) -> Message:
    return {"role": "user", "content": text}


async def request(
    parts: Parts,
    messages: list[Message],
    session: str | None = "s",
    budget_ratio: float | None = None,
    **body: Any,
) -> Request:
    context = RequestContext(tenant="t1", session_id=session, budget_ratio=budget_ratio)
    return await parts.engine.parts.intake.request(
        {"model": MODEL, "messages": messages, **body}, context
    )


def exploding(name: str) -> TokenCounter:
    """A tokenizer by `name` that fails the test if anything is counted by it."""

    def count(text: str) -> int:
        raise AssertionError("tokenized")

    return TokenCounter(name, count)


def guessed(model: str) -> float:
    labels = {"model": model}
    return REGISTRY.get_sample_value("context_proxy_model_limit_defaulted_total", labels) or 0.0


def state_with(calibration: dict[str, float]) -> SessionView:
    return SessionView(
        base=SessionMeta(tenant="t1", session_id="s", length=2, calibration=calibration),
        match=Match("full", 2, 2, [], ""),
        new=(),
        totals={},
        checkpoint=None,
        checkpoints=0,
        expected_version=1,
        serialized=None,
    )


# -- the budget -----------------------------------------------------------------------


async def test_the_budget_is_80_percent_of_the_models_input_limit(
    parts: Parts, make_parts: Callable[..., Parts]
) -> None:
    asked = await request(parts, [said("hi")])
    assert (asked.budget, asked.input_limit) == (102_400, 128_000)  # gpt-4o-mini's own
    small = make_parts(window=1000)
    asked = await request(small, [said("hi")])
    assert (asked.budget, asked.input_limit) == (800, 1000)
    # The output asked for is room off the limit: 1000 - 300 leaves less than 800.
    assert (await request(small, [said("hi")], max_tokens=300)).budget == 700


async def test_the_configured_share_and_a_requests_own_share(
    make_parts: Callable[..., Parts],
) -> None:
    configured = make_parts(window=1000, context={"budget_ratio": 0.6})
    asked = await request(configured, [said("hi")])
    assert (asked.budget, asked.own_budget) == (600, False)
    # `X-Context-Budget-Ratio`: this request's own, which marks it as such.
    asked = await request(configured, [said("hi")], budget_ratio=0.5)
    assert (asked.budget, asked.own_budget) == (500, True)


async def test_a_sessions_calibration_divides_its_budget(
    make_parts: Callable[..., Parts],
) -> None:
    parts = make_parts(window=1000)
    intake = parts.engine.parts.intake
    label = parts.engine.label(MODEL)
    body = {"model": MODEL, "messages": [said("hi")]}
    context = RequestContext(tenant="t1", session_id="s")
    asked = await intake.request(body, context)
    calibrated = intake.calibrated(body, context, asked, state_with({label: 1.25}))
    assert calibrated.budget == 640  # 800 / 1.25: the provider counts a quarter more
    own = replace(context, budget_ratio=0.5)
    calibrated = intake.calibrated(body, own, asked, state_with({label: 1.25}))
    assert calibrated.budget == 400  # 500 / 1.25, on the request's own share
    capped = body | {"max_tokens": 300}
    calibrated = intake.calibrated(capped, context, asked, state_with({label: 1.25}))
    assert calibrated.budget == 560  # (1000 - 300) / 1.25: the output's room stays
    # Another model's calibration, or none: the budget stands.
    assert intake.calibrated(body, context, asked, state_with({"other": 1.4})) is asked
    assert intake.calibrated(body, context, asked, state_with({})) is asked


async def test_a_model_whose_limit_nobody_knows_is_planned_on_the_default_window(
    parts: Parts, tmp_path: Path
) -> None:
    known = guessed(MODEL)
    parts.engine.parts.intake.count_guessed_limit(MODEL)  # gpt-4o-mini's limit is known
    assert guessed(MODEL) == known
    entry = {
        "model_name": "mystery",
        "litellm_params": {
            "model": "openai/mystery-model-unknown",
            "api_base": "http://127.0.0.1:9/v1",
            "api_key": "sk-unit",
        },
    }
    parts = build(str(tmp_path / "store"), Settings.model_validate({"model_list": [entry]}))
    try:
        intake = parts.engine.parts.intake
        context = RequestContext(tenant="t1", session_id="s")
        body = {"model": "mystery", "messages": [said("hi")]}
        asked = await intake.request(body, context)
        assert (asked.input_limit, asked.budget) == (8192, 6553)  # floor(0.8 × 8192)
        # The operator sees how many turns were planned on a guess, and of which model.
        before = guessed("mystery")
        intake.count_guessed_limit("mystery")
        assert guessed("mystery") == before + 1
    finally:
        await parts.close()


# -- what is counted apart from the conversation ----------------------------------------


async def test_the_system_prompt_and_tools_are_counted_apart_from_the_conversation(
    parts: Parts,
) -> None:
    messages = [SYSTEM, said("hi"), {"role": "assistant", "content": "hello"}, said("and?")]
    asked = await request(parts, messages, tools=[TOOL])
    assert asked.system == [SYSTEM] and asked.conversation == messages[1:]
    assert asked.messages == messages
    counter = asked.counter
    assert counter.name == "o200k_base"  # gpt-4o-mini's tokenizer
    assert asked.system_tokens == counter.count_messages([SYSTEM])  # with the reply's priming
    assert asked.tools_tokens == counter.count_tools([TOOL])
    assert (asked.key, asked.mode) == (("t1", "s"), "auto")


async def test_a_sessions_frame_is_its_system_prompt_and_tools(parts: Parts) -> None:
    first = await request(parts, [SYSTEM, said("hi")], tools=[TOOL])
    later = await request(parts, [SYSTEM, said("hi"), said("more")], tools=[TOOL])
    titled = await request(parts, [{"role": "system", "content": "Title it."}, said("hi")])
    untooled = await request(parts, [SYSTEM, said("hi")])
    assert first.frame and first.frame == later.frame  # the same agent's conversation
    assert titled.frame != first.frame and untooled.frame != first.frame
    assert (await request(parts, [SYSTEM, said("hi")], session=None)).frame == ""


async def test_a_session_may_send_whole_what_the_fold_trigger_leaves_beside_the_system(
    make_parts: Callable[..., Parts],
) -> None:
    """A turn far from its budget sends its history without tokenizing it, up to the
    fold trigger (70% of what the system prompt leaves of the budget), less the system
    prompt's own bound."""
    parts = make_parts(window=1000)
    asked = await request(parts, [SYSTEM, said("hi")])
    base = asked.system_tokens
    trigger = int(base + 0.7 * (800 - base))
    system_bound = 3 + len("system") + len(SYSTEM["content"]) + 3  # a token per byte
    assert asked.system_and_tools_bound == (system_bound, 0)
    assert asked.sendable_uncounted == trigger - system_bound
    bounded = parts.engine.parts.intake.bounded(asked)
    assert bounded.counter is BOUND
    assert (bounded.system_tokens, bounded.tools_tokens) == (system_bound, 0)
    assert (bounded.budget, bounded.conversation) == (800, asked.conversation)
    # No session: nothing is sent uncounted.
    assert (await request(parts, [SYSTEM, said("hi")], session=None)).sendable_uncounted == 0


async def test_a_sessions_reply_is_kept_up_to_the_configured_bytes(
    parts: Parts, make_parts: Callable[..., Parts]
) -> None:
    # By default: room for the model's longest reply (32 bytes × 16,384), at least 1 MiB.
    assert (await request(parts, [said("hi")])).reply_limit == 1 << 20
    capped = make_parts(session={"max_reply_bytes": 2048})
    assert (await request(capped, [said("hi")])).reply_limit == 2048


# -- the provider's prompt cache --------------------------------------------------------


async def test_a_sessions_turns_share_one_prompt_cache_key(
    parts: Parts, make_parts: Callable[..., Parts]
) -> None:
    one = await request(parts, [said("hi")])
    again = await request(parts, [said("hi"), said("more")])
    other = await request(parts, [said("hi")], session="project-apollo")
    assert one.cache_key is not None and one.cache_key.startswith("ctx-")
    assert other.cache_key is not None and "apollo" not in other.cache_key  # names none
    assert one.cache_key == again.cache_key != other.cache_key
    assert (await request(parts, [said("hi")], session=None)).cache_key is None
    # The client's own key is left as it is (`namespaced` makes it its tenant's).
    assert (await request(parts, [said("hi")], prompt_cache_key="mine")).cache_key is None
    unaware = make_parts(context={"cache_aware": False})
    assert (await request(unaware, [said("hi")])).cache_key is None


@pytest.fixture
async def claude(tmp_path: Path) -> AsyncIterator[Parts]:
    """An engine in front of an Anthropic model, whose cache takes four marks."""
    entry = {
        "model_name": "claude",
        "litellm_params": {
            "model": "anthropic/claude-sonnet-4-5",
            "api_base": "http://127.0.0.1:9/",
            "api_key": "sk-unit",
        },
    }
    parts = build(str(tmp_path / "claude"), Settings.model_validate({"model_list": [entry]}))
    yield parts
    await parts.close()


def marked(count: int) -> list[Message]:
    mark = {"type": "ephemeral"}
    return [
        {"role": "user", "content": [{"type": "text", "text": f"{i}", "cache_control": mark}]}
        for i in range(count)
    ]


async def test_more_cache_marks_than_the_provider_takes_are_refused_before_any_call(
    claude: Parts,
) -> None:
    intake = claude.engine.parts.intake
    for count, session in ((4, "s"), (4, None)):
        body = {"model": "claude", "messages": marked(count)}
        context = RequestContext(tenant="t1", session_id=session, body=orjson.dumps(body))
        asked = await intake.request(body, context)
        assert asked.cache_marks == (count if session else None)  # the turn adds beside them
    body = {"model": "claude", "messages": marked(5)}
    context = RequestContext(tenant="t1", session_id="s", body=orjson.dumps(body))
    with pytest.raises(InvalidRequest, match="At most 4 blocks") as raised:
        await intake.request(body, context)
    assert raised.value.param == "cache_control"
    assert claude.upstream.sent == []


# -- a request with no session ----------------------------------------------------------


async def test_a_request_that_fits_by_its_bytes_is_sent_as_it_came_untokenized(
    parts: Parts,
) -> None:
    messages = [SYSTEM, said("hello " * 200)]
    body = {"model": MODEL, "messages": messages, "temperature": 0}
    context = RequestContext(tenant="t1", body=orjson.dumps(body))
    asked = await parts.engine.parts.intake.request(body, context)
    untokenized = replace(asked, counter=exploding(asked.counter.name))
    turn = await parts.engine.parts.intake.stateless(body, untokenized, context)
    assert turn.body is body
    assert (turn.tokens_original, turn.tokens_sent, turn.compression) == (None, None, "none")
    assert (turn.key, turn.managed, turn.input_limit) == (None, True, 128_000)


async def test_a_request_whose_bytes_do_not_show_it_fits_is_counted(parts: Parts) -> None:
    messages = [SYSTEM, said("one"), {"role": "assistant", "content": "two"}, said("three")]
    body = {"model": MODEL, "messages": messages}
    context = RequestContext(tenant="t1")  # no body's bytes: nothing bounds it
    asked = await parts.engine.parts.intake.request(body, context)
    turn = await parts.engine.parts.intake.stateless(body, asked, context)
    counted = sum(asked.counter.count_message(m) for m in messages[1:])
    assert turn.tokens_original == asked.system_tokens + counted == turn.tokens_sent
    assert (turn.compression, turn.body["messages"]) == ("none", messages)


async def test_a_request_over_its_budget_is_cut_to_it_keeping_its_latest_messages(
    make_parts: Callable[..., Parts],
) -> None:
    parts = make_parts(window=1000)  # a budget of 800
    messages: list[Message] = [SYSTEM]
    for number in range(12):
        words = " ".join(f"n{number}w{i}" for i in range(40))
        messages += [said(words), {"role": "assistant", "content": f"ok {number}"}]
    messages.append(said("and now?"))
    body = {"model": MODEL, "messages": messages}
    context = RequestContext(tenant="t1", body=orjson.dumps(body))
    asked = await parts.engine.parts.intake.request(body, context)
    turn = await parts.engine.parts.intake.stateless(body, asked, context)
    sent = turn.body["messages"]
    assert turn.compression == "truncated"
    assert turn.tokens_original is not None and turn.tokens_original > 800
    assert turn.tokens_sent is not None and turn.tokens_sent <= 800
    assert sent[0] == SYSTEM and sent[-1] == said("and now?")
    assert "omitted" in sent[1]["content"]  # never cut silently
    assert sent[2:] == messages[len(messages) - len(sent) + 2 :]  # the latest, verbatim


async def test_a_request_with_no_session_is_validated_even_when_it_fits(parts: Parts) -> None:
    body = {"model": MODEL, "messages": [said("hi"), {"role": "wizard", "content": "x"}]}
    context = RequestContext(tenant="t1", body=orjson.dumps(body))
    asked = await parts.engine.parts.intake.request(body, context)
    with pytest.raises(InvalidRequest, match=r"messages\[1\]"):
        await parts.engine.parts.intake.stateless(body, asked, context)
