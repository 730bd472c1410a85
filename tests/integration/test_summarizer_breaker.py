"""A summarizer that keeps failing is left alone for a while (a circuit breaker with
back-off), the session is still served within its budget meanwhile, and summaries
resume by themselves once the summarizer is back."""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

import httpx
import openai

from tests.proxies import MODEL, proxy_config
from tests.summarizing import asks_summary
from tests.upstream import FakeUpstream, Reply
from tests.waiting import eventually

WINDOW = 1000


def metric(url: str, name: str) -> float:
    found = re.search(
        rf'^{name}\{{model="{MODEL}"\}} (\S+)$', httpx.get(url + "/metrics").text, re.M
    )
    return float(found[1]) if found else 0.0


def test_a_failing_summarizer_is_backed_off_and_the_session_stays_within_budget(
    upstream: FakeUpstream, start_proxy: Any, store: dict[str, Any]
) -> None:
    config = proxy_config(upstream, session=store, context={"summary_backoff_seconds": 2})
    config["model_list"][0]["model_info"] = {"max_input_tokens": WINDOW}
    url = start_proxy(config)
    summarizer = {"down": True, "calls": 0}

    def respond(body: dict[str, Any]) -> str | Reply:
        if not asks_summary(body):
            return "noted"
        summarizer["calls"] += 1
        if summarizer["down"]:
            return Reply(status=500, error_message="summarizer down")
        return "The user shared notes."

    upstream.default = Reply(respond=respond)
    sdk = openai.OpenAI(
        base_url=url + "/v1", api_key="k", max_retries=0, default_headers={"X-Session-Id": "s"}
    )
    messages: list[dict[str, Any]] = []

    budget = math.floor(0.8 * WINDOW)

    def turn(number: int) -> None:
        """One turn, served within the budget (by the proxy's own count of what it sent)."""
        words = " ".join(f"t{number}w{i}" for i in range(90))
        messages.append({"role": "user", "content": words})
        raw = sdk.chat.completions.with_raw_response.create(model=MODEL, messages=messages)
        assert int(raw.headers["X-Context-Tokens-Sent"]) <= budget
        messages.append({"role": "assistant", "content": raw.parse().choices[0].message.content})

    for number in range(30):  # far past the window: every later turn needs a summary
        turn(number)
    # Three failures open the breaker; within its 2 s back-off no turn calls it again.
    # (Without it: a sync and a background attempt on each of ~25 turns.)
    assert 3 <= summarizer["calls"] <= 5, summarizer
    assert metric(url, "context_proxy_summarizations_skipped_total") >= 10
    assert metric(url, "context_proxy_summarizer_open") == 1
    # Served all along: every turn reached the model, truncated instead of summarized.
    chat = [r for r in upstream.chat_requests() if not asks_summary(r.body)]
    assert len(chat) == 30
    assert len(chat[-1].body["messages"]) < len(messages)
    # The summarizer is back: once the back-off is over, a turn's trial call succeeds
    # and closes the breaker (turns meanwhile are served, truncated, as above).
    summarizer["down"] = False
    numbers = itertools.count(100)

    def closed() -> bool:
        turn(next(numbers))
        return metric(url, "context_proxy_summarizer_open") == 0

    eventually(closed, "the breaker to close", seconds=60)
    eventually(
        lambda: httpx.get(url + "/v1/sessions/s", headers={"authorization": "Bearer k"}).json()[
            "checkpoints"
        ],
        "a summary stored",
    )
