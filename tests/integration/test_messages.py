"""The Anthropic Messages door, through the real anthropic SDK, to a loopback upstream
that speaks the Messages API (LiteLLM's `anthropic/…` deployment)."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest

from tests.proxies import UPSTREAM_KEY, proxy_config
from tests.upstream import FakeUpstream, Reply

CLAUDE = "claude-test"
SIGNATURE = "EqQBCkgIARABGAIiQL2+/sig/with+base64=="


def claude_config(upstream: FakeUpstream, window: int | None = None, **sections: Any) -> dict:
    """CLAUDE routed to the test upstream's Messages API (by LiteLLM's translation)."""
    config = proxy_config(upstream, **sections)
    entry: dict[str, Any] = {
        "model_name": CLAUDE,
        "litellm_params": {
            "model": "anthropic/claude-sonnet-4-5",
            "api_base": upstream.base_url.removesuffix("/v1"),
            "api_key": UPSTREAM_KEY,
        },
    }
    if window is not None:
        entry["model_info"] = {"max_input_tokens": window, "max_output_tokens": 512}
    config["model_list"].append(entry)
    return config


def client(url: str, session: str | None = "s1", key: str = "client-key") -> anthropic.Anthropic:
    headers = {"X-Session-Id": session} if session else {}
    return anthropic.Anthropic(
        base_url=url, api_key=key, max_retries=0, default_headers=headers, timeout=30
    )


def blocks(message: Any) -> list[dict[str, Any]]:
    """A reply's content blocks as a client sends them back."""
    return [block.model_dump(exclude_none=True) for block in message.content]


def stored_session(url: str, path: str, key: str = "client-key") -> httpx.Response:
    """A session as its caller (a tenant by its key) sees it."""
    return httpx.get(url + path, headers={"x-api-key": key})


@pytest.fixture
def claude_url(upstream: FakeUpstream, start_proxy: Any) -> str:
    return start_proxy(claude_config(upstream))


def test_system_blocks_keep_their_cache_breakpoints(claude_url: str, upstream: FakeUpstream):
    system = [
        {"type": "text", "text": "You are terse."},
        {"type": "text", "text": "Project rules.", "cache_control": {"type": "ephemeral"}},
    ]
    reply = client(claude_url).messages.create(
        model=CLAUDE,
        max_tokens=100,
        system=system,
        messages=[{"role": "user", "content": "hello there"}],
    )
    assert reply.type == "message" and reply.role == "assistant"
    assert reply.content[0].text == "echo: hello there"
    assert reply.stop_reason == "end_turn"
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0
    sent = upstream.messages_requests()[-1].body
    assert [b["text"] for b in sent["system"]] == ["You are terse.", "Project rules."]
    assert sent["system"][1]["cache_control"] == {"type": "ephemeral"}
    assert sent["messages"] == [{"role": "user", "content": "hello there"}]  # as it came


def test_tool_use_and_thinking_go_back_byte_for_byte(claude_url: str, upstream: FakeUpstream):
    """A thinking block's signature, a tool_use and its tool_result survive the round
    trip through the proxy, and the stored session keeps the signed block."""
    thinking = [
        {"type": "thinking", "thinking": "Need the weather.", "signature": SIGNATURE},
        {"type": "redacted_thinking", "data": "opaque+data/=="},
    ]
    call = {"id": "toolu_01", "type": "function"}
    call["function"] = {"name": "weather", "arguments": '{"city": "Oslo"}'}
    upstream.queue(Reply(tool_calls=[call], thinking=thinking), Reply(content="It is cold."))
    tools = [
        {
            "name": "weather",
            "description": "Weather by city.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
            "cache_control": {"type": "ephemeral"},
        }
    ]
    sdk = client(claude_url, "tools")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Oslo?"}]
    first = sdk.messages.create(model=CLAUDE, max_tokens=200, tools=tools, messages=messages)
    assert first.stop_reason == "tool_use"
    assert blocks(first)[:2] == thinking
    assert blocks(first)[2] == {
        "type": "tool_use",
        "id": "toolu_01",
        "name": "weather",
        "input": {"city": "Oslo"},
    }
    messages += [
        {"role": "assistant", "content": blocks(first)},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "-5 C"},
                {"type": "text", "text": "And so?"},
            ],
        },
    ]
    second = sdk.messages.create(model=CLAUDE, max_tokens=200, tools=tools, messages=messages)
    assert second.content[0].text == "It is cold."
    sent = upstream.messages_requests()[-1].body
    assistant = sent["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][:2] == thinking  # the signature, byte for byte
    assert assistant["content"][2]["type"] == "tool_use"
    assert assistant["content"][2]["input"] == {"city": "Oslo"}
    user = sent["messages"][2]
    assert user["content"][0]["type"] == "tool_result"
    assert user["content"][0]["tool_use_id"] == "toolu_01"
    assert user["content"][-1] == {"type": "text", "text": "And so?"}
    assert sent["tools"][0]["cache_control"] == {"type": "ephemeral"}
    stored = stored_session(claude_url, "/v1/sessions/tools").json()
    assert len(stored["messages"]) == 5  # user, assistant, tool, user, assistant: once each
    assert stored["messages"][1]["thinking_blocks"] == thinking


def test_streaming_sends_anthropics_event_sequence(claude_url: str, upstream: FakeUpstream):
    thinking = [{"type": "thinking", "thinking": "Plan it.", "signature": SIGNATURE}]
    call = {"id": "toolu_02", "type": "function"}
    call["function"] = {"name": "lookup", "arguments": '{"q": "tide"}'}
    upstream.queue(Reply(content="Looking it up.", tool_calls=[call], thinking=thinking))
    sdk = client(claude_url, "stream")
    request = {"role": "user", "content": "When is high tide?"}
    with sdk.messages.stream(model=CLAUDE, max_tokens=100, messages=[request]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert blocks(final) == [
        {"type": "thinking", "thinking": "Plan it.", "signature": SIGNATURE},
        {"type": "text", "text": "Looking it up."},
        {"type": "tool_use", "id": "toolu_02", "name": "lookup", "input": {"q": "tide"}},
    ]
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens > 0
    stored = stored_session(claude_url, "/v1/sessions/stream").json()["messages"]
    assert stored[-1]["thinking_blocks"] == [thinking[0]]
    assert stored[-1]["tool_calls"][0]["id"] == "toolu_02"


def test_a_stream_cut_off_ends_with_an_error_event_and_stores_nothing(
    claude_url: str, upstream: FakeUpstream
):
    upstream.queue(Reply(content="one two three four five six", fail_after_chunks=5))
    sdk = client(claude_url, "cut")
    with (
        pytest.raises(anthropic.APIError),
        sdk.messages.stream(
            model=CLAUDE, max_tokens=100, messages=[{"role": "user", "content": "count"}]
        ) as stream,
    ):
        for _ in stream:
            pass
    assert stored_session(claude_url, "/v1/sessions/cut").status_code == 404


def test_errors_are_anthropic_shaped(upstream: FakeUpstream, start_proxy: Any) -> None:
    url = start_proxy(
        claude_config(upstream, auth={"keys": [{"key": "sk-proxy-key-0123456789abcdef"}]})
    )
    with pytest.raises(anthropic.AuthenticationError) as denied:
        client(url, key="sk-wrong-key-0000").messages.create(
            model=CLAUDE, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert denied.value.body["type"] == "error"
    assert denied.value.body["error"]["type"] == "authentication_error"
    sdk = client(url, key="sk-proxy-key-0123456789abcdef")
    with pytest.raises(anthropic.BadRequestError) as bad:
        sdk.messages.create(
            model=CLAUDE,
            max_tokens=10,
            messages=[{"role": "user", "content": [{"type": "tool_result"}]}],
        )
    assert bad.value.body["error"]["type"] == "invalid_request_error"
    assert "tool_use_id" in bad.value.body["error"]["message"]
    upstream.queue(Reply(status=500, error_message="provider fell over"))
    with pytest.raises(anthropic.InternalServerError) as failed:
        sdk.messages.create(
            model=CLAUDE, max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    assert failed.value.body["type"] == "error"
    assert (
        stored_session(url, "/v1/sessions/s1", "sk-proxy-key-0123456789abcdef").status_code == 404
    )


def test_count_tokens_is_what_the_proxy_would_send(upstream: FakeUpstream, start_proxy: Any):
    """On a 4,096-token model a long conversation is fitted: count_tokens answers with
    the fitted window's tokens, the same number the turn then reports as sent."""
    url = start_proxy(claude_config(upstream, window=4096))
    sdk = client(url, "counted")
    messages: list[dict[str, Any]] = []
    for turn in range(12):
        messages.append({"role": "user", "content": " ".join(f"w{turn}x{i}" for i in range(300))})
        messages.append({"role": "assistant", "content": f"noted {turn}"})
    messages.append({"role": "user", "content": "what did I say first?"})
    sdk.messages.create(model=CLAUDE, max_tokens=100, messages=messages)  # summarizes
    messages += [
        {"role": "assistant", "content": "the first words"},
        {"role": "user", "content": "and then?"},
    ]
    system = [{"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral"}}]
    counted = sdk.messages.count_tokens(model=CLAUDE, system=system, messages=messages)
    raw = sdk.messages.with_raw_response.create(
        model=CLAUDE, max_tokens=100, system=system, messages=messages
    )
    assert raw.headers["x-context-compression"] == "summary"
    sent = upstream.messages_requests()[-1].body["system"]
    assert sent[0] == system[0]  # the client's breakpoint first, where it was
    assert sent[1]["text"].startswith("Summary of the earlier conversation")
    assert counted.input_tokens == int(raw.headers["x-context-tokens-sent"])
    assert counted.input_tokens <= 0.8 * 4096
    assert int(raw.headers["x-context-tokens-original"]) > 4096


def test_metadata_user_id_names_the_session(claude_url: str, upstream: FakeUpstream) -> None:
    """Claude Code sets no header per conversation; its `metadata.user_id` does."""
    sdk = client(claude_url, session=None)
    metadata = {"user_id": "user_ab12_account_cd34_session_ef56"}
    sdk.messages.create(
        model=CLAUDE, max_tokens=10, metadata=metadata, messages=[{"role": "user", "content": "a"}]
    )
    stored = stored_session(claude_url, "/v1/sessions/user_ab12_account_cd34_session_ef56")
    assert stored.status_code == 200
    assert [m["role"] for m in stored.json()["messages"]] == ["user", "assistant"]
