"""Chat completions through the proxy, driven by the real openai SDK."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.proxies import MODEL, proxy_config
from tests.upstream import FakeUpstream, Reply

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
}


@pytest.fixture
def url_config(upstream: FakeUpstream, lean: bool) -> dict[str, Any]:
    """The proxy on both upstream paths: every test here runs on each."""
    return proxy_config(upstream, server={"lean_upstream": lean})


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="client-key", max_retries=0)


def async_client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="client-key", max_retries=0)


def test_completion_reaches_upstream_and_returns_reply(url: str, upstream: FakeUpstream) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of Norway?"},
    ]
    reply = client(url).chat.completions.create(
        model=MODEL, messages=messages, temperature=0.2, max_tokens=50, seed=7, stop=["\n\n"]
    )
    assert reply.choices[0].message.content == "echo: What is the capital of Norway?"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.prompt_tokens > 0
    [received] = upstream.chat_requests()
    assert received.body["messages"] == messages
    assert received.body["model"] == MODEL
    assert received.body["temperature"] == 0.2
    assert received.body["max_tokens"] == 50
    assert received.body["seed"] == 7
    assert received.body["stop"] == ["\n\n"]
    # The upstream sees the configured provider key, never the client's.
    assert received.headers["authorization"] == "Bearer sk-test-upstream-secret-0123456789"


async def test_async_client(url: str, upstream: FakeUpstream) -> None:
    reply = await async_client(url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "ping"}]
    )
    assert reply.choices[0].message.content == "echo: ping"
    assert len(upstream.chat_requests()) == 1


def test_n_and_response_format_pass_through(url: str, upstream: FakeUpstream) -> None:
    upstream.queue(Reply(content='{"ok": true}'))
    reply = client(url).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "json please"}],
        n=2,
        response_format={"type": "json_object"},
        top_p=0.9,
        presence_penalty=0.1,
        user="user-42",
    )
    assert [c.message.content for c in reply.choices] == ['{"ok": true}'] * 2
    body = upstream.chat_requests()[0].body
    assert body["n"] == 2
    assert body["response_format"] == {"type": "json_object"}
    assert body["top_p"] == 0.9
    assert body["user"] == "user-42"


def test_tool_call_round_trip(url: str, upstream: FakeUpstream) -> None:
    upstream.queue(Reply(tool_calls=[CALL]))
    sdk = client(url)
    messages: list[dict] = [{"role": "user", "content": "Weather in Oslo?"}]
    first = sdk.chat.completions.create(
        model=MODEL, messages=messages, tools=TOOLS, tool_choice="auto"
    )
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "call_1",
        "get_weather",
        {"city": "Oslo"},
    )
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12°C, rain"},
    ]
    upstream.queue(Reply(content="It is 12°C and raining in Oslo."))
    second = sdk.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "It is 12°C and raining in Oslo."
    first_body, second_body = (r.body for r in upstream.chat_requests())
    assert first_body["tools"] == TOOLS
    assert first_body["tool_choice"] == "auto"
    assert second_body["messages"][1]["tool_calls"][0]["id"] == "call_1"
    assert second_body["messages"][2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "12°C, rain",
    }


def test_streaming_with_usage(url: str, upstream: FakeUpstream) -> None:
    upstream.queue(Reply(content="one two three four"))
    stream = client(url).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "count"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three four"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert usage_chunks and usage_chunks[-1].usage.completion_tokens > 0
    assert upstream.chat_requests()[0].body["stream"] is True


def test_streaming_without_usage_sends_no_usage_chunk(url: str, upstream: FakeUpstream) -> None:
    chunks = list(
        client(url).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hello there"}], stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: hello there"
    assert not [c for c in chunks if not c.choices]


async def test_async_streaming_tool_calls(url: str, upstream: FakeUpstream) -> None:
    upstream.queue(Reply(tool_calls=[CALL]))
    stream = await async_client(url).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=TOOLS,
        stream=True,
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    async for chunk in stream:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += delta.id or ""
                if delta.function:
                    entry["name"] += delta.function.name or ""
                    entry["arguments"] += delta.function.arguments or ""
    assert finish == "tool_calls"
    assert calls == {0: {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'}}


def test_models_and_health(url: str) -> None:
    models = client(url).models.list()
    assert [m.id for m in models.data] == [MODEL]
    import httpx

    assert httpx.get(url + "/health/live").json()["status"] == "ok"
    assert httpx.get(url + "/health/ready").status_code == 200


def test_unknown_model_is_404(url: str, upstream: FakeUpstream) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client(url).chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.body["code"] == "model_not_found"
    assert "no-such-model" in caught.value.body["message"]
    assert upstream.chat_requests() == []


def test_provider_model_passes_through_when_allowed(
    upstream: FakeUpstream, start_proxy: Any, lean: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LiteLLM's OpenAI provider reads its base URL and key from the environment.
    monkeypatch.setenv("OPENAI_BASE_URL", upstream.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key-for-passthrough")
    from tests.proxies import proxy_config

    denied = start_proxy(proxy_config(upstream, server={"lean_upstream": lean}))
    with pytest.raises(openai.NotFoundError):
        client(denied).chat.completions.create(
            model="openai/gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )
    allowed = start_proxy(
        proxy_config(upstream, server={"lean_upstream": lean, "allow_unlisted_models": True})
    )
    reply = client(allowed).chat.completions.create(
        model="openai/gpt-4o", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content == "echo: hi"
    assert upstream.chat_requests()[-1].body["model"] == "gpt-4o"
