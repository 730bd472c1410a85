"""The test upstream bills prompts through the providers' prompt caches and reports usage
in each API's own fields, streamed or not, as the real SDKs read them (no proxy here:
this is the yardstick the proxy's tests and the cost benchmark measure with)."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from tests.clock import Clock
from tests.upstream import FakeUpstream

LONG = " ".join(f"rule {n}: keep the build green." for n in range(400))  # ~3,600 tokens
MARK = {"type": "ephemeral"}


@pytest.fixture
def clock(upstream: FakeUpstream) -> Clock:
    upstream.clock = clock = Clock()
    return clock


def test_chat_reports_a_cached_prefix_stream_or_not(upstream: FakeUpstream, clock: Clock) -> None:
    sdk = openai.OpenAI(base_url=upstream.base_url, api_key="k", max_retries=0)
    messages: list[Any] = [{"role": "system", "content": LONG}, {"role": "user", "content": "hi"}]
    first = sdk.chat.completions.create(model="m", messages=messages)
    assert first.usage and first.usage.prompt_tokens_details
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    messages += [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}]
    stream = sdk.chat.completions.create(
        model="m", messages=messages, stream=True, stream_options={"include_usage": True}
    )
    usage = [chunk.usage for chunk in stream if chunk.usage][-1]
    assert usage.prompt_tokens_details
    cached = usage.prompt_tokens_details.cached_tokens
    # The system message and the first user turn are the prefix, in 128-token steps.
    assert cached is not None and 1024 <= cached <= first.usage.prompt_tokens
    assert (cached - 1024) % 128 == 0 and first.usage.prompt_tokens - cached < 128
    assert upstream.chat_requests()[-1].usage["prompt_tokens_details"]["cached_tokens"] == cached
    clock.advance(301)  # idle past the TTL: the cache is cold
    again = sdk.chat.completions.create(model="m", messages=messages)
    assert again.usage and again.usage.prompt_tokens_details
    assert again.usage.prompt_tokens_details.cached_tokens == 0


def test_messages_reads_and_writes_at_breakpoints_stream_or_not(
    upstream: FakeUpstream, clock: Clock
) -> None:
    sdk = anthropic.Anthropic(base_url=upstream.base_url.removesuffix("/v1"), api_key="k")
    system: Any = [{"type": "text", "text": LONG, "cache_control": MARK}]
    turn: Any = [{"role": "user", "content": "hi"}]
    first = sdk.messages.create(model="claude", max_tokens=50, system=system, messages=turn)
    written = first.usage.cache_creation_input_tokens
    assert written and written > 1024 and first.usage.cache_read_input_tokens == 0
    assert 0 < first.usage.input_tokens < 20  # "hi", after the breakpoint
    with sdk.messages.stream(model="claude", max_tokens=50, system=system, messages=turn) as s:
        final = s.get_final_message()
    assert final.usage.cache_read_input_tokens == written
    assert final.usage.cache_creation_input_tokens == 0
    assert final.usage.input_tokens == first.usage.input_tokens
    clock.advance(301)
    cold = sdk.messages.create(model="claude", max_tokens=50, system=system, messages=turn)
    assert cold.usage.cache_read_input_tokens == 0
    assert cold.usage.cache_creation_input_tokens == written


def test_messages_refuses_a_fifth_breakpoint(upstream: FakeUpstream) -> None:
    base = upstream.base_url.removesuffix("/v1")
    sdk = anthropic.Anthropic(base_url=base, api_key="k", max_retries=0)
    system: Any = [{"type": "text", "text": f"rule {n}", "cache_control": MARK} for n in range(5)]
    with pytest.raises(anthropic.BadRequestError, match="maximum of 4 blocks"):
        sdk.messages.create(
            model="claude",
            max_tokens=50,
            system=system,
            messages=[{"role": "user", "content": "hi"}],
        )


def test_responses_reports_cached_tokens_by_prompt_cache_key(
    upstream: FakeUpstream, clock: Clock
) -> None:
    sdk = openai.OpenAI(base_url=upstream.base_url, api_key="k", max_retries=0)
    first = sdk.responses.create(model="m", instructions=LONG, input="hi", prompt_cache_key="a")
    assert first.usage and first.usage.input_tokens_details.cached_tokens == 0
    other = sdk.responses.create(model="m", instructions=LONG, input="hi", prompt_cache_key="b")
    assert other.usage and other.usage.input_tokens_details.cached_tokens == 0
    with sdk.responses.stream(
        model="m", instructions=LONG, input="hi again", prompt_cache_key="a"
    ) as stream:
        done = stream.get_final_response()
    assert done.usage and done.usage.input_tokens_details.cached_tokens >= 1024
