"""Whichever process serves a session's turn plans it the same: what a plan depends on
beyond the request (the session's calibration, the recall block its last turn placed,
the memory block it was sent) is kept with the session in the store, never only in the
memory of the process that served the turn before. And a preview or a count plans as a
turn does, writing nothing."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import openai

from tests.benchmarks.scorecard import SYSTEM, drive, generate
from tests.integration.test_recall_memory import (
    WINDOW,
    memory_block,
    model_calls,
    recall_block,
    start,
)
from tests.proxies import MODEL
from tests.upstream import FakeUpstream

KEY = "tenant-a-key-0123456789"


class Alternating(httpx.BaseTransport):
    """Sends each request to the next of several proxies in turn, as a load balancer
    without session affinity does."""

    def __init__(self, urls: list[str]) -> None:
        self._next: Iterator[httpx.URL] = itertools.cycle(httpx.URL(url) for url in urls)
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        to = next(self._next)
        request.url = request.url.copy_with(host=to.host, port=to.port)
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


def replicas(start_proxy: Any, upstream: FakeUpstream, **sections: Any) -> list[str]:
    """Two proxies on one store (the same directory: the disk store is safe across
    processes), as two replicas behind a balancer."""
    return [start(start_proxy, upstream, **sections) for _ in range(2)]


def alternating(urls: list[str], session: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=urls[0] + "/v1",
        api_key=KEY,
        max_retries=0,
        default_headers={"X-Session-Id": session},
        http_client=httpx.Client(transport=Alternating(urls)),
    )


def test_a_recall_block_keeps_its_place_and_bytes_across_replicas(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """A long session asks, turn after turn, about what it said at its start, each turn
    served by the other replica: the recall block the first of them placed is sent again
    where it was, byte for byte, by the replica that did not place it."""
    urls = replicas(start_proxy, upstream)
    drive(alternating(urls[:1], "steady"), MODEL, generate(turns=120, facts=12, updates=4))
    with httpx.Client(base_url=urls[0], headers={"Authorization": f"Bearer {KEY}"}) as http:
        history = http.get("/v1/sessions/steady").json()["messages"]
    opening = next(m["content"] for m in history if m["role"] == "user")
    chat = alternating(urls, "steady")
    asked = len(model_calls(upstream))
    for _ in range(6):
        history.append({"role": "user", "content": f"What did we say about this? {opening}"})
        reply = chat.chat.completions.create(model=MODEL, messages=[SYSTEM, *history])
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    bodies = model_calls(upstream)[asked:]
    compared = 0
    for before, after in itertools.pairwise(bodies):
        block = recall_block(after)
        assert block is not None and recall_block(before) is not None
        if before["messages"][1] != after["messages"][1]:
            continue  # a new summary between them: a new archive, a block chosen anew
        compared += 1
        at = next(i for i, m in enumerate(after["messages"]) if m["content"] == block)
        assert block == recall_block(before)
        assert before["messages"][: at + 1] == after["messages"][: at + 1]
    assert compared >= 3


def test_the_memory_block_stays_put_across_replicas(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """Room for one remembered fact: the first turn asks about search and gets the
    search lead; the turns after it keep that block while the memory does not change,
    rather than choosing again by what they ask: also the last, on the other replica,
    which asks only about billing."""
    memory = {"enabled": True, "per_tenant": True, "max_injection_tokens": 28}
    first, second = replicas(start_proxy, upstream, memory=memory)
    said = [
        ("a", "For the record, the billing lead is Maria Chen."),
        ("a2", "And the search lead is Jonas Novak."),
    ]
    for session, text in said:
        alternating([first], session).chat.completions.create(
            model=MODEL, messages=[SYSTEM, {"role": "user", "content": text}]
        )
    history: list[dict[str, Any]] = [SYSTEM]
    asked = ["Who leads search?", "Who is the billing lead?", "Billing lead?", "Billing?"]
    for index, text in enumerate(asked):
        chat = alternating([second if index == len(asked) - 1 else first], "b")
        history.append({"role": "user", "content": text})
        reply = chat.chat.completions.create(model=MODEL, messages=history)
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    blocks = [memory_block(body) for body in model_calls(upstream)[-4:]]
    assert blocks[0] is not None and "Jonas Novak" in blocks[0] and "Maria" not in blocks[0]
    assert blocks.count(blocks[0]) == 4  # one prefix for the provider's cache, whoever sent it


def test_a_sessions_calibration_plans_its_turns_on_every_replica(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """The upstream counts 50 tokens a message, far more than the proxy's estimate of a
    short one: the session learns it on one replica, and the other plans the session's
    next turn on the same, smaller budget. A request of no session is not calibrated."""
    first, second = replicas(start_proxy, upstream)
    messages = [{"role": "user", "content": "hello"}]
    headers = {"Authorization": f"Bearer {KEY}", "X-Session-Id": "calibrated"}
    upstream.exact_usage = False
    with httpx.Client(timeout=30) as http:
        http.post(
            f"{first}/v1/chat/completions",
            headers=headers,
            json={"model": MODEL, "messages": messages},
        ).raise_for_status()
        upstream.exact_usage = True
        learned = http.post(
            f"{second}/v1/sessions/calibrated/preview",
            headers=headers,
            json={"model": MODEL, "messages": messages},
        ).json()["budget"]
    # The largest correction a session may learn, on the replica that never served it.
    assert learned == int(int(0.8 * WINDOW) / 1.5)


def test_a_preview_and_a_count_write_nothing(upstream: FakeUpstream, start_proxy: Any) -> None:
    """A preview plans the turn, recall and memory included, and leaves the session as it
    was: its version, its record and what its next turn will send."""
    url = start(start_proxy, upstream, memory={"enabled": True, "per_tenant": True})
    chat = alternating([url], "quiet")
    drive(chat, MODEL, generate(turns=60, facts=8, updates=2))
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        stored = http.get("/v1/sessions/quiet").json()
        history = stored["messages"]
        body = {"model": MODEL, "messages": [*history, {"role": "user", "content": "and?"}]}
        previews = [http.post("/v1/sessions/quiet/preview", json=body).json() for _ in range(2)]
        counted = http.post(
            "/v1/messages/count_tokens",
            headers={"X-Session-Id": "quiet", "anthropic-version": "2023-06-01"},
            json={"model": MODEL, "messages": [{"role": "user", "content": "and?"}]},
        )
        assert counted.status_code == 200
        assert http.get("/v1/sessions/quiet").json() == stored
    assert previews[0] == previews[1]
