"""A long conversation far from its budget is not tokenized: its first request (and a
Responses request that opens a session of its own) costs no count of its history, its
turns are sent whole and reported by the provider's count, and counting starts, once,
when the bound computed from its bytes nears the budget."""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest

from proxy.http.headers import TOKENS_ORIGINAL, TOKENS_SENT
from tests.integration.test_metrics import delta, scrape
from tests.proxies import MODEL, proxy_config
from tests.summarizing import asks_summary
from tests.upstream import FakeUpstream, count_prompt_tokens

KEY = {"Authorization": "Bearer client-key"}
WORDS = [
    "deploy",
    "cluster",
    "token",
    "latency",
    "cache",
    "budget",
    "window",
    "summary",
    "replica",
    "shard",
]
# 80k tokens: a budget of 64k, a fold trigger near 45k; the opening conversation (38 KB)
# has a bound (about its bytes) of 39k tokens, and a count of about 5k.
WINDOW = 80_000


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def conversation(seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": text(rng, 16)} for i in range(260)]


def start(start_proxy, upstream: FakeUpstream) -> str:
    config = proxy_config(upstream)
    config["model_list"][0]["model_info"] = {"max_input_tokens": WINDOW}
    return start_proxy(config)


def turn(url: str, session: str, messages: list[dict[str, Any]], **headers: str) -> httpx.Response:
    response = httpx.post(
        url + "/v1/chat/completions",
        json={"model": MODEL, "messages": messages},
        headers=KEY | {"X-Session-Id": session} | headers,
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return response


def plans(url: str, session: str) -> list[dict[str, Any]]:
    response = httpx.get(url + f"/v1/sessions/{session}/plans", headers=KEY)
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


def test_a_long_conversation_far_from_its_budget_is_sent_whole_uncounted(
    upstream: FakeUpstream, start_proxy
) -> None:
    url = start(start_proxy, upstream)
    history = [{"role": "system", "content": "Be brief."}, *conversation()]
    before = scrape(url)

    first = turn(url, "far", history)
    # The proxy did not count it, so it says nothing of its own count...
    assert TOKENS_SENT not in first.headers and TOKENS_ORIGINAL not in first.headers
    record = plans(url, "far")[-1]
    assert record["tokens_sent"] is None and record["compression"] == "none"
    # ...and the model got the conversation as it was sent.
    assert upstream.chat_requests()[-1].body["messages"] == history
    # The tokens it reports are the provider's.
    after = scrape(url)
    labels = {"model": MODEL, "api": "chat"}
    prompt = first.json()["usage"]["prompt_tokens"]
    assert delta(before, after, "context_proxy_tokens_total", kind="client", **labels) == prompt
    assert delta(before, after, "context_proxy_tokens_total", kind="saved", **labels) == 0

    # The next turns, resent whole or appended, stay uncounted while the bound is far.
    reply = first.json()["choices"][0]["message"]
    history += [{"role": "assistant", "content": reply["content"]}]
    history += [{"role": "user", "content": "And the replica count?"}]
    resent = turn(url, "far", history)
    assert TOKENS_SENT not in resent.headers
    appended = turn(
        url, "far", [{"role": "user", "content": "Thanks."}], **{"X-Session-Mode": "append"}
    )
    assert TOKENS_SENT not in appended.headers
    sent = upstream.chat_requests()[-1].body["messages"]
    # (the system prompt is the client's to send: an appending client sent none)
    assert sent[: len(history) - 1] == history[1:] and sent[-1]["content"] == "Thanks."

    # A preview counts, whatever the bound: the proxy's own count of that same prompt.
    preview = httpx.post(
        url + "/v1/sessions/far/preview",
        json={"model": MODEL, "messages": [{"role": "user", "content": "next"}]},
        headers=KEY | {"X-Session-Mode": "append"},
        timeout=30,
    )
    assert preview.status_code == 200, preview.text
    shown = preview.json()
    assert shown["compression"] == "none"
    assert shown["tokens_sent"] == pytest.approx(
        count_prompt_tokens({"messages": shown["messages"]}), rel=0.05
    )


def answered(upstream: FakeUpstream) -> dict[str, Any]:
    """The last request that answered a turn: a background summary may come after it."""
    return next(r.body for r in reversed(upstream.chat_requests()) if not asks_summary(r.body))


def test_counting_starts_once_the_bound_nears_the_budget_and_then_plans_as_ever(
    upstream: FakeUpstream, start_proxy
) -> None:
    url = start(start_proxy, upstream)
    history = conversation()
    turn(url, "nearing", history)
    assert plans(url, "nearing")[-1]["tokens_sent"] is None

    # A paste that takes the bound past the fold trigger: the turn is counted, and its
    # count is what the model was sent.
    rng = random.Random(8)
    history += [{"role": "assistant", "content": "ok"}]
    history += [{"role": "user", "content": text(rng, 1500)}]
    counted = turn(url, "nearing", history)
    sent = answered(upstream)
    assert sent["messages"] == history
    assert int(counted.headers[TOKENS_SENT]) == pytest.approx(count_prompt_tokens(sent), rel=0.05)
    assert int(counted.headers[TOKENS_ORIGINAL]) == int(counted.headers[TOKENS_SENT])
    record = plans(url, "nearing")[-1]
    assert record["tokens_sent"] == int(counted.headers[TOKENS_SENT])

    # Counted from then on, past the budget it compresses, within the budget.
    for _step in range(12):
        history += [{"role": "assistant", "content": "noted"}]
        history += [{"role": "user", "content": text(rng, 9000)}]
        response = turn(url, "nearing", history)
        assert TOKENS_SENT in response.headers
        sent = answered(upstream)
        assert count_prompt_tokens(sent) <= 0.8 * WINDOW
        assert sent["messages"][-1] == history[-1]
        if int(response.headers[TOKENS_SENT]) < int(response.headers[TOKENS_ORIGINAL]):
            break
    else:
        pytest.fail("the conversation never outgrew its budget")


def test_a_retry_keeps_the_session_as_it_was(upstream: FakeUpstream, start_proxy) -> None:
    """A retried or regenerated last turn cuts the reply it replaces: the totals are the
    session's less what was cut (read alone), the same as a fresh session's count of
    that conversation, counted or not."""
    url = start(start_proxy, upstream)
    short = conversation()[:31]  # 4 KB: counted from its first turn
    first = turn(url, "retried", short)
    again = turn(url, "retried", short)  # the same request again: its reply replaced
    assert again.headers[TOKENS_ORIGINAL] == first.headers[TOKENS_ORIGINAL]
    edited = [*short[:-1], {"role": "user", "content": "Say it differently."}]
    regenerated = turn(url, "retried", edited)
    fresh = turn(url, "fresh", edited)
    assert regenerated.headers[TOKENS_ORIGINAL] == fresh.headers[TOKENS_ORIGINAL]
    stored = httpx.get(url + "/v1/sessions/retried", headers=KEY).json()["messages"]
    assert stored[:-1] == edited and stored[-1]["role"] == "assistant"

    long = conversation()  # uncounted: a retry leaves it so, and stores its reply once
    turn(url, "long", long)
    retried = turn(url, "long", long)
    assert TOKENS_SENT not in retried.headers
    stored = httpx.get(url + "/v1/sessions/long", headers=KEY).json()["messages"]
    assert len(stored) == len(long) + 1 and stored[:-1] == long
