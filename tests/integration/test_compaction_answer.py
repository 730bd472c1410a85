"""An agent's request for a summary of its conversation (Claude Code's /compact, Codex's
compaction), answered from the summary the proxy already holds: no model reads the
conversation again. Every door, answered whole and streamed, to a chat deployment
(translated) and to the provider routes the proxy speaks natively; where the summary is
stale (more than `max_summary_tokens` after it), the model writes the answer as before."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from proxy.engine.planner import agent_compaction
from proxy.http import headers
from tests.integration.test_deploy_install import (
    CLAUDE,
    KEY,
    NATIVE,
    WINDOW,
    deploy_config,
    long_answers,
    send,
)
from tests.proxies import MODEL
from tests.upstream import FakeUpstream, Reply

SUMMARY = "The user sent numbered turns; each answer was long."  # the summarizer's, here
CLAUDE_CODE = (
    "Your task is to create a detailed summary of the conversation so far, paying close "
    "attention to the user's explicit requests and your previous actions."
)
CODEX = "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary."


def conversation(url: str, door: str, model: str, session: str, stream: bool) -> list[dict]:
    """Ten turns, each resending the whole conversation: long enough to be summarized."""
    messages: list[dict[str, str]] = []
    for n in range(10):
        messages.append({"role": "user", "content": f"turn {n}"})
        reply = send(url, door, model, session, messages, stream)
        assert reply.endswith("done."), reply[-200:]
        messages.append({"role": "assistant", "content": reply})
    return messages


def asked_for(upstream: FakeUpstream, prompt: str) -> int:
    """Requests the upstream received that carry the agent's compaction prompt."""
    return sum(prompt in json.dumps(received.body) for received in upstream.requests)


def transcript_length(url: str, session: str) -> int:
    got = httpx.get(
        f"{url}/v1/sessions/{session}", headers={"Authorization": f"Bearer {KEY}"}, timeout=30
    )
    assert got.status_code == 200, got.text
    return len(got.json()["messages"])


@pytest.mark.parametrize("door", ["chat", "messages", "responses"])
def test_a_compaction_request_is_answered_from_the_summary(
    door: str, upstream: FakeUpstream, start_proxy: Any
) -> None:
    upstream.default = Reply(respond=long_answers)
    config = deploy_config(upstream)
    config["context"] = {"max_summary_tokens": WINDOW}  # any span after the summary
    url = start_proxy(config)
    prompt = CODEX if door == "responses" else CLAUDE_CODE
    for model in (MODEL, NATIVE, CLAUDE):
        for stream in (False, True):
            session = f"{door}-{model}-{stream}"
            messages = conversation(url, door, model, session, stream)
            stored = transcript_length(url, session)
            asking = [*messages, {"role": "user", "content": prompt}]
            answer = send(url, door, model, session, asking, stream)
            where = (door, model, stream)
            assert asked_for(upstream, prompt) == 0, where  # no model call
            assert answer.startswith(SUMMARY), (where, answer[:300])
            # the messages after the span the summary covers follow it, as they were
            assert "The latest messages, as they were:" in answer, where
            assert f"user: turn 9\n\nassistant: {messages[-1]['content']}" in answer, where
            assert transcript_length(url, session) == stored, where  # nothing stored
            # the agent goes on from the answer: a new chapter of the same session
            resumed = [
                {"role": "user", "content": f"This session is being continued: {answer}"},
                {"role": "user", "content": "turn 10"},
            ]
            assert send(url, door, model, session, resumed, stream).endswith("done."), where


def test_the_answer_says_so_and_names_no_prompt_tokens(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    upstream.default = Reply(respond=long_answers)
    config = deploy_config(upstream)
    config["context"] = {"max_summary_tokens": WINDOW}
    url = start_proxy(config)
    messages = conversation(url, "chat", MODEL, "said", stream=False)
    asking = [*messages, {"role": "user", "content": CLAUDE_CODE}]
    got = httpx.post(
        url + "/v1/chat/completions",
        json={"model": MODEL, "messages": asking},
        headers={"Authorization": f"Bearer {KEY}", "X-Session-Id": "said"},
        timeout=60,
    )
    assert got.status_code == 200, got.text
    assert got.headers[headers.SESSION_TURN] == "answered"
    assert got.headers[headers.COMPRESSION] == "summary"
    assert got.headers[headers.TOKENS_SENT] == "0"
    usage = got.json()["usage"]
    assert usage["prompt_tokens"] == 0 and usage["completion_tokens"] > 0, usage


STALE = {"max_summary_tokens": 64}
OFF = {"max_summary_tokens": WINDOW, "answer_compaction": False}


@pytest.mark.parametrize("context", [STALE, OFF], ids=["stale", "off"])
def test_a_stale_summary_or_the_setting_off_leaves_the_answer_to_the_model(
    context: dict[str, Any], upstream: FakeUpstream, start_proxy: Any
) -> None:
    upstream.default = Reply(respond=long_answers)
    config = deploy_config(upstream)
    config["context"] = context
    url = start_proxy(config)
    messages = conversation(url, "messages", CLAUDE, "stale", stream=True)
    asking = [*messages, {"role": "user", "content": CLAUDE_CODE}]
    answer = send(url, "messages", CLAUDE, "stale", asking, stream=True)
    assert asked_for(upstream, CLAUDE_CODE) == 1  # the model wrote it
    assert answer.endswith("done.") and not answer.startswith(SUMMARY), answer[:300]


@pytest.mark.parametrize("fresh", [True, False], ids=["from-the-summary", "by-the-model"])
def test_responses_compact_returns_a_conversation_that_goes_on_as_a_chapter(
    fresh: bool, upstream: FakeUpstream, start_proxy: Any
) -> None:
    """OpenAI's `responses/compact` (Codex's remote compaction), by the openai SDK: the
    user messages, then the summary as a user message; the conversation that goes on
    from it is a chapter of the same session, the old one kept."""
    upstream.default = Reply(respond=long_answers)
    config = deploy_config(upstream)
    config["context"] = {"max_summary_tokens": WINDOW if fresh else 64}
    url = start_proxy(config)
    messages = conversation(url, "responses", NATIVE, "compacts", stream=False)
    stored = transcript_length(url, "compacts")
    sdk = openai.OpenAI(
        base_url=url + "/v1",
        api_key=KEY,
        max_retries=0,
        default_headers={"X-Session-Id": "compacts"},
        timeout=60,
    )
    raw = sdk.responses.with_raw_response.compact(model=NATIVE, input=messages)
    compacted = raw.parse()
    assert compacted.object == "response.compaction" and compacted.usage.output_tokens > 0
    *kept, resumed = raw.http_response.json()["output"]
    assert kept == [m for m in messages if m["role"] == "user"]  # the user messages
    assert resumed["role"] == "user"
    summary = resumed["content"][0]["text"]
    assert summary.startswith(agent_compaction.RESUMED)
    assert asked_for(upstream, agent_compaction.REQUEST) == (0 if fresh else 1)
    if fresh:
        assert summary.removeprefix(agent_compaction.RESUMED).startswith(SUMMARY)
        assert raw.headers[headers.SESSION_TURN] == "answered"
    assert transcript_length(url, "compacts") == stored  # the request is not stored
    going_on = [*kept, resumed, {"role": "user", "content": "turn 10"}]
    assert send(url, "responses", NATIVE, "compacts", going_on, False).endswith("done.")
    got = httpx.get(
        url + "/v1/sessions/compacts", headers={"Authorization": f"Bearer {KEY}"}, timeout=30
    ).json()["messages"]
    assert len(got) == stored + len(going_on) + 1  # a chapter after the old conversation
    assert agent_compaction.RESUMED.strip() in json.dumps(got[stored:])
