"""Money, honestly, end to end: through the real openai and anthropic SDKs, on every
door, streamed or not, each turn's plan record holds the usage the upstream reported,
/metrics counts its cached and written tokens, and the turn's net saving equals a sum
done here by hand from that usage and LiteLLM's prices for the model. The upstream
simulates each provider's prompt cache (`tests/prompt_cache.py`) on the same clock as
the proxy's engine, so a gap longer than the cache's TTL takes no time."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import yaml

from tests.clock import Clock
from tests.integration.test_metrics import delta, scrape
from tests.marathon import is_summarizer
from tests.proxies import UPSTREAM_KEY
from tests.servers import serve
from tests.upstream import FakeUpstream, Received, Reply

KEY = {"Authorization": "Bearer client-key"}
# LiteLLM's cost map, per token: the prices the figures below are worked out with.
GPT = {"input": 2e-06, "output": 8e-06, "read": 5e-07, "write": 2e-06}  # gpt-4.1
CLAUDE = {"input": 3e-06, "output": 1.5e-05, "read": 3e-07, "write": 3.75e-06}  # sonnet 4.5
LONG = " ".join(f"Rule {n}: keep the build green and the diff small." for n in range(300))
MARK = {"type": "ephemeral"}


def config(upstream: FakeUpstream, directory: Path, window: int | None = None) -> dict:
    """`gpt` (chat and translated Responses), `gpt-native` (OpenAI's Responses API) and
    `claude` (Anthropic's Messages API), named for real models so their prices are
    LiteLLM's, at the test upstream's address."""
    info = {"max_input_tokens": window} if window else {}
    base = upstream.base_url
    models = [
        ("gpt", "openai/gpt-4.1", base, info),
        ("gpt-native", "openai/gpt-4.1", base, {**info, "native_api": True}),
        ("claude", "anthropic/claude-sonnet-4-5", base.removesuffix("/v1"), info),
    ]
    return {
        "model_list": [
            {
                "model_name": name,
                "litellm_params": {"model": model, "api_base": api_base, "api_key": UPSTREAM_KEY},
                "model_info": model_info,
            }
            for name, model, api_base, model_info in models
        ],
        "router_settings": {"num_retries": 0},
        "session": {"path": str(directory / "sessions")},
    }


@contextmanager
def proxy(upstream: FakeUpstream, directory: Path, clock: Clock, **options: Any) -> Iterator[str]:
    """A real proxy whose engine runs on `clock`, as the upstream's prompt caches do."""
    from proxy.config.settings import load_settings
    from proxy.http.app import create_app

    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config(upstream, directory, **options)))
    upstream.clock = clock
    with serve(create_app(load_settings(path, environ={}), clock=clock)) as url:
        yield url


@pytest.fixture
def clock() -> Clock:
    return Clock(1_800_000_000.0)


def plans(url: str, session: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{url}/v1/sessions/{session}/plans", headers=KEY)
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


def reported(received: Received) -> dict[str, int]:
    """What the upstream billed, from its own usage fields, read by hand per API:
    Anthropic's input_tokens leave the cache's reads and writes out; OpenAI's count them."""
    usage = received.usage
    if "input_tokens" in usage and "cache_read_input_tokens" in usage:  # Messages
        read, write = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
        prompt = usage["input_tokens"] + read + write
        return {
            "prompt": prompt,
            "cache_read": read,
            "cache_write": write,
            "output": usage["output_tokens"],
        }
    if "input_tokens" in usage:  # Responses
        read = usage["input_tokens_details"]["cached_tokens"]
        return {
            "prompt": usage["input_tokens"],
            "cache_read": read,
            "cache_write": 0,
            "output": usage["output_tokens"],
        }
    read = usage["prompt_tokens_details"]["cached_tokens"]
    return {
        "prompt": usage["prompt_tokens"],
        "cache_read": read,
        "cache_write": 0,
        "output": usage["completion_tokens"],
    }


def spent(used: dict[str, int], price: dict[str, float]) -> float:
    uncached = used["prompt"] - used["cache_read"] - used["cache_write"]
    return (
        uncached * price["input"]
        + used["cache_read"] * price["read"]
        + used["cache_write"] * price["write"]
        + used["output"] * price["output"]
    )


class Resend:
    """The counterfactual by hand: the client resends its whole conversation (the proxy's
    count of it scaled to the provider's tokens); the previous turn's conversation is a
    cache read within 300 s (OpenAI's: if 1,024 tokens or more, in 128-token steps), the
    rest is new input
    (Anthropic's: written to the cache), the reply is output."""

    def __init__(self, price: dict[str, float], breakpoints: bool) -> None:
        self.price, self.breakpoints = price, breakpoints
        self.previous: tuple[int, float] | None = None

    def __call__(self, record: dict[str, Any], used: dict[str, int]) -> float:
        tokens = round(record["tokens_original"] * used["prompt"] / record["tokens_sent"])
        cached = 0
        if self.previous is not None and record["at"] - self.previous[1] <= 300:
            cached = min(self.previous[0], tokens)
            if not self.breakpoints:  # read in 128-token steps beyond 1,024
                cached = 0 if cached < 1024 else 1024 + (cached - 1024) // 128 * 128
        self.previous = (tokens, record["at"])
        new = self.price["write"] if self.breakpoints else self.price["input"]
        return (
            cached * self.price["read"]
            + (tokens - cached) * new
            + used["output"] * self.price["output"]
        )


def chat_turn(url: str, session: str, messages: list[Any], stream: bool) -> str:
    sdk = openai.OpenAI(
        base_url=url + "/v1",
        api_key="client-key",
        max_retries=0,
        default_headers={"X-Session-Id": session},
    )
    if not stream:
        return (
            sdk.chat.completions.create(model="gpt", messages=messages).choices[0].message.content
            or ""
        )
    chunks = list(sdk.chat.completions.create(model="gpt", messages=messages, stream=True))
    # The client did not ask for the stream's usage: the proxy asked, and kept it.
    assert not any(chunk.usage for chunk in chunks)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def messages_turn(url: str, session: str, messages: list[Any], stream: bool) -> str:
    sdk = anthropic.Anthropic(
        base_url=url, api_key="client-key", max_retries=0, default_headers={"X-Session-Id": session}
    )
    system: Any = [{"type": "text", "text": LONG, "cache_control": MARK}]
    if not stream:
        reply = sdk.messages.create(
            model="claude", max_tokens=100, system=system, messages=messages
        )
    else:
        with sdk.messages.stream(
            model="claude", max_tokens=100, system=system, messages=messages
        ) as events:
            reply = events.get_final_message()
    return "".join(block.text for block in reply.content if block.type == "text")


def responses_turn(url: str, session: str, messages: list[Any], stream: bool) -> str:
    sdk = openai.OpenAI(
        base_url=url + "/v1",
        api_key="client-key",
        max_retries=0,
        default_headers={"X-Session-Id": session},
    )
    body: Any = {"model": "gpt-native", "instructions": LONG, "input": messages}
    if not stream:
        return sdk.responses.create(**body).output_text
    with sdk.responses.stream(**body) as events:
        return events.get_final_response().output_text


DOORS = {
    # door: (the turn, its model, its API label, its prices, a cache with breakpoints?)
    "chat": (chat_turn, "gpt", "chat", GPT, False),
    "messages": (messages_turn, "claude", "messages", CLAUDE, True),
    "responses": (responses_turn, "gpt-native", "responses", GPT, False),
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("door", sorted(DOORS))
def test_each_turn_records_the_reported_usage_and_its_net_saving(
    upstream: FakeUpstream, tmp_path: Path, clock: Clock, door: str, stream: bool
) -> None:
    turn, model, api, price, breakpoints = DOORS[door]
    if door == "chat":  # a chat client's system prompt is a message
        first: list[Any] = [{"role": "system", "content": LONG}]
    else:
        first = []
    with proxy(upstream, tmp_path, clock) as url:
        before = scrape(url)
        messages = [*first, {"role": "user", "content": "Fix the failing test."}]
        for gap in (0, 30, 301):  # a turn, one within the cache's TTL, one after it
            clock.advance(gap)
            answer = turn(url, f"money-{door}", messages, stream)
            messages += [
                {"role": "assistant", "content": answer},
                {"role": "user", "content": f"And after {gap} s?"},
            ]
        records = plans(url, f"money-{door}")
        receipt = httpx.get(f"{url}/v1/sessions/money-{door}", headers=KEY).json()["receipt"]
        after = scrape(url)
    calls = [r for r in upstream.requests if r.usage]
    assert len(records) == len(calls) == 3
    by_hand = Resend(price, breakpoints)
    for record, call in zip(records, calls, strict=True):
        used = reported(call)
        assert record["usage"] == used  # what the upstream reported, in one shape
        assert record["tokens_original"] == record["tokens_sent"]  # nothing was cut
        resend = by_hand(record, used)
        assert record["cost"]["spent"] == pytest.approx(spent(used, price), abs=1e-9)
        assert record["cost"]["resend"] == pytest.approx(resend, abs=1e-9)
        assert record["cost"]["net"] == pytest.approx(resend - spent(used, price), abs=1e-9)
        assert record["cost"]["summaries"] == 0
    warm = reported(calls[1])
    assert warm["cache_read"] > 1024  # the provider's cache served the second turn
    cold = reported(calls[2])
    assert cold["cache_read"] == 0  # and not the third, after the TTL
    labels = {"model": model, "api": api}
    total = {kind: sum(reported(c)[kind] for c in calls) for kind in ("cache_read", "cache_write")}
    assert (
        delta(before, after, "context_proxy_tokens_total", kind="cached", **labels)
        == total["cache_read"]
    )
    assert (
        delta(before, after, "context_proxy_tokens_total", kind="cache_write", **labels)
        == total["cache_write"]
    )
    net = sum(record["cost"]["net"] for record in records)
    assert delta(before, after, "context_proxy_net_saved_usd_total", **labels) == pytest.approx(
        net, abs=1e-8
    )
    for kind in ("spent", "resend"):
        figure = sum(record["cost"][kind] for record in records)
        assert delta(
            before, after, "context_proxy_cost_usd_total", kind=kind, **labels
        ) == pytest.approx(figure, abs=1e-8)
    # The session's receipt sums its turns.
    assert receipt["turns"] == 3
    for kind in ("spent", "summaries", "resend", "net"):
        figure = sum(record["cost"][kind] for record in records)
        assert receipt[kind] == pytest.approx(figure, abs=1e-8)


def test_a_compacting_session_is_charged_its_summaries_and_reports_net_not_gross(
    upstream: FakeUpstream, tmp_path: Path, clock: Clock
) -> None:
    """A long chat session over an 8k window: the proxy compacts (summaries made while a
    turn waits and in the background, each charged once) and between compactions its
    requests are mostly cache reads. The net saving is the hand computation, and less
    than the old gross figure (the tokens not sent, priced as input)."""
    upstream.default = Reply(
        respond=lambda body: "Summary: the user set rules." if is_summarizer(body) else "ok"
    )
    session = "money-compacting"
    messages: list[Any] = [{"role": "system", "content": LONG}]
    with proxy(upstream, tmp_path, clock, window=8192) as url:
        for turn in range(30):
            clock.advance(20)
            words = " ".join(f"t{turn}w{i}" for i in range(250))
            messages.append({"role": "user", "content": words})
            answer = chat_turn(url, session, messages, stream=turn % 2 == 1)
            messages.append({"role": "assistant", "content": answer})
        records = plans(url, session)
        receipt = httpx.get(f"{url}/v1/sessions/{session}", headers=KEY).json()["receipt"]
    summarizer = [r for r in upstream.chat_requests() if is_summarizer(r.body)]
    turns = [r for r in upstream.chat_requests() if not is_summarizer(r.body)]
    assert len(records) == len(turns) == 30
    assert summarizer and any(r["compression"] == "summary" for r in records)
    # Every summarizer call is charged once: to a turn, or still owed by the session.
    made = sum(spent(reported(call), GPT) for call in summarizer)
    charged = sum(record["cost"]["summaries"] for record in records)
    assert charged > 0
    assert charged + receipt["summaries_uncharged"] == pytest.approx(made, abs=1e-9)
    by_hand = Resend(GPT, breakpoints=False)
    net = 0.0
    for record, call in zip(records, turns, strict=True):
        used = reported(call)
        assert record["usage"] == used
        cost = spent(used, GPT) + record["cost"]["summaries"]
        resend = by_hand(record, used)
        assert record["cost"]["spent"] == pytest.approx(cost, abs=1e-9)
        assert record["cost"]["resend"] == pytest.approx(resend, abs=1e-9)
        net += resend - cost
    assert receipt["net"] == pytest.approx(net, abs=1e-8)
    # The proxy's requests were mostly cache reads, and the gross figure flatters.
    read = sum(reported(call)["cache_read"] for call in turns)
    assert read > 0.5 * sum(reported(call)["prompt"] for call in turns)
    gross = sum(record["tokens_saved"] for record in records) * GPT["input"]
    assert net < gross


def test_a_summary_made_for_a_turn_the_upstream_then_fails_is_still_charged(
    upstream: FakeUpstream, tmp_path: Path, clock: Clock
) -> None:
    """A turn that must fold first makes its summary, then the provider fails the turn:
    nothing is stored, but the summarizer's calls were paid for, so the session owes
    them (its next turns are charged them), never forgets them."""
    failed: list[int] = []
    calls: list[str] = []

    def respond(body: dict[str, Any]) -> str | Reply:
        if is_summarizer(body):
            calls.append("summary")
            return "Summary: the user set rules."
        calls.append("turn")
        if not failed and calls[-2:] == ["summary", "turn"]:
            failed.append(len(calls))  # the turn right after its own summary: fails
            return Reply(status=500, error_message="overloaded")
        return "ok"

    upstream.default = Reply(respond=respond)
    session = "money-failed-after-summary"
    messages: list[Any] = [{"role": "system", "content": LONG}]
    with proxy(upstream, tmp_path, clock, window=8192) as url:
        for turn in range(6):
            clock.advance(20)
            words = " ".join(f"t{turn}w{i}" for i in range(900 if turn == 3 else 150))
            messages.append({"role": "user", "content": words})
            try:
                answer = chat_turn(url, session, messages, stream=False)
            except openai.InternalServerError:
                answer = chat_turn(url, session, messages, stream=False)  # the client retries
            messages.append({"role": "assistant", "content": answer})
        records = plans(url, session)
        receipt = httpx.get(f"{url}/v1/sessions/{session}", headers=KEY).json()["receipt"]
    assert failed, calls
    summarizer = [r for r in upstream.chat_requests() if is_summarizer(r.body)]
    made = sum(spent(reported(call), GPT) for call in summarizer)
    charged = sum(record["cost"]["summaries"] for record in records)
    assert charged + receipt["summaries_uncharged"] == pytest.approx(made, abs=1e-9)
