"""A summary that keeps the prompt prefix: each fold adds a segment and leaves the text
before it byte-identical, so a provider's prompt cache keeps it; the segments are
rewritten into one only when they outgrow the summary's share. End to end through the
openai SDK, on both stores."""

from __future__ import annotations

import itertools
from typing import Any

import httpx

from proxy.conversation.tokens import counter_for_model
from proxy.summary.fold import MIN_SEGMENT_SHARE, REWRITE_TASK, SYSTEM_PROMPT
from proxy.summary.message import PINNED_LABEL, SUMMARY_PREFIX
from tests.benchmarks.scorecard import generate, respond
from tests.integration.test_recall_memory import client, drive, model_calls, start
from tests.proxies import MODEL
from tests.upstream import FakeUpstream, Reply

SHARE = 100  # context.max_summary_tokens: small, so the segments outgrow it within the test


def compressing(body: dict[str, Any]) -> str | Reply:
    """The scorecard's gist summarizer, with a rewrite as short as a model's would be."""
    prompt = str(body["messages"][-1]["content"])
    if body["messages"][0]["content"] == SYSTEM_PROMPT and REWRITE_TASK in prompt:
        return "The user went over the project's areas."
    return respond(body)


def segments(body: dict[str, Any]) -> str | None:
    """The summary's segments in a request, as one text (the pinned facts after them off)."""
    for message in body["messages"]:
        content = str(message["content"])
        if message["role"] == "system" and content.startswith(SUMMARY_PREFIX):
            return content.removeprefix(SUMMARY_PREFIX).split(f"\n\n{PINNED_LABEL}")[0]
    return None


def test_a_fold_adds_a_segment_and_leaves_the_summary_before_it_byte_identical(
    upstream: FakeUpstream, start_proxy, store: dict[str, Any]
) -> None:
    session = f"segments-{store.get('store', 'disk')}"
    url = start(start_proxy, upstream, session=store, context={"max_summary_tokens": SHARE})
    upstream.default = Reply(respond=compressing)
    drive(client(url, session), MODEL, generate(turns=200, facts=12, updates=4))
    bodies = model_calls(upstream)
    counter = counter_for_model(f"openai/{MODEL}")

    appended = consolidated = 0
    for before, after in itertools.pairwise(bodies):
        old, new = segments(before), segments(after)
        if old is None or old == new:
            continue
        assert new is not None
        if new.startswith(f"{old}\n\n"):
            appended += 1
            # The client's system prompt and the summary up to the new segment: the
            # same bytes as in the request before.
            assert after["messages"][0] == before["messages"][0]
            assert after["messages"][1]["content"].startswith(SUMMARY_PREFIX + old)
        else:
            consolidated += 1
            # Only once the segments left less than their share's minimum for another.
            assert SHARE - counter.count_text(old) < MIN_SEGMENT_SHARE * SHARE, old
            assert "\n\n" not in new  # one segment
    assert appended >= 2 and consolidated >= 1, (appended, consolidated)

    # The stored summary is what the model got: its segments, and the facts pinned after.
    with httpx.Client(
        base_url=url, headers={"Authorization": "Bearer tenant-a-key-0123456789"}
    ) as http:
        stored = http.get(f"/v1/sessions/{session}").json()["checkpoints"]
    latest = max(stored, key=lambda c: c["covers_until"])
    assert "\n\n".join(latest["segments"]) == segments(bodies[-1])
    assert latest["pinned"]
    assert SUMMARY_PREFIX + latest["text"] == bodies[-1]["messages"][1]["content"]
