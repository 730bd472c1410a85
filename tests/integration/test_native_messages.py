"""The Messages door in Anthropic's own API: to an `anthropic/…` deployment the planned
window goes in that API, so what the chat form cannot say reaches the provider as the
client said it, on both paths (the proxy's lean call and LiteLLM's Messages route).
The loopback upstream speaks the Messages API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.test_messages import (
    CLAUDE,
    SIGNATURE,
    claude_config,
    client,
    stored_session,
)
from tests.upstream import FakeUpstream, Reply

EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture
def start_proxy(start_proxy: Callable[[dict[str, Any]], str], lean: bool) -> Callable[..., str]:
    """Every test on both paths of a native call: the lean one, and LiteLLM's route
    (`server.lean_upstream: false`)."""

    def started(config: dict[str, Any]) -> str:
        return start_proxy(config | {"server": config.get("server", {}) | {"lean_upstream": lean}})

    return started


def long_conversation(turns: int = 12) -> list[dict[str, Any]]:
    """More than a 4,096-token window holds: the proxy summarizes its start."""
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        messages.append({"role": "user", "content": " ".join(f"w{turn}x{i}" for i in range(300))})
        messages.append({"role": "assistant", "content": f"noted {turn}"})
    messages.append({"role": "user", "content": "what did I say first?"})
    return messages


def breakpoints(body: dict[str, Any]) -> int:
    blocks = [*body.get("tools", ()), *body.get("system", ())]
    for message in body["messages"]:
        blocks += message["content"] if isinstance(message["content"], list) else []
    return sum("cache_control" in block for block in blocks)


def test_a_failed_tool_result_reaches_anthropic_as_sent(upstream: FakeUpstream, start_proxy: Any):
    """`is_error` and a breakpoint on a tool result, a signed thinking block before the
    call: each in the upstream request exactly as the client sent it."""
    url = start_proxy(claude_config(upstream))
    thinking = {"type": "thinking", "thinking": "Try the file.", "signature": SIGNATURE}
    use = {"type": "tool_use", "id": "toolu_9", "name": "Read", "input": {"path": "a.py"}}
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_9",
        "content": "No such file.",
        "is_error": True,
        "cache_control": EPHEMERAL,
    }
    messages = [
        {"role": "user", "content": "Read a.py"},
        {"role": "assistant", "content": [thinking, use]},
        {"role": "user", "content": [result, {"type": "text", "text": "Now what?"}]},
    ]
    reply = client(url, "failed-tool").messages.create(
        model=CLAUDE, max_tokens=100, messages=messages
    )
    assert reply.content[0].text == "echo: Now what?"
    sent = upstream.messages_requests()[-1].body
    assert sent["messages"] == messages


def test_a_summary_is_marked_for_the_prompt_cache(upstream: FakeUpstream, start_proxy: Any):
    """A turn that sends a summary puts a cache breakpoint after it, where Anthropic's
    four leave room; a request that already uses four gets none."""
    url = start_proxy(claude_config(upstream, window=4096))
    sdk = client(url, "cached-summary")
    system = [{"type": "text", "text": "Rules.", "cache_control": EPHEMERAL}]
    raw = sdk.messages.with_raw_response.create(
        model=CLAUDE, max_tokens=100, system=system, messages=long_conversation()
    )
    assert raw.headers["x-context-compression"] == "summary"
    sent = upstream.messages_requests()[-1].body
    assert sent["system"][0] == system[0]
    assert sent["system"][-1]["text"].startswith("Summary of the earlier conversation")
    assert sent["system"][-1]["cache_control"] == EPHEMERAL
    assert breakpoints(sent) == 2

    four = [{"type": "text", "text": f"Rule {n}.", "cache_control": EPHEMERAL} for n in range(4)]
    raw = client(url, "four-breakpoints").messages.with_raw_response.create(
        model=CLAUDE, max_tokens=100, system=four, messages=long_conversation()
    )
    assert raw.headers["x-context-compression"] == "summary"
    sent = upstream.messages_requests()[-1].body
    assert "cache_control" not in sent["system"][-1]
    assert breakpoints(sent) == 4


def test_the_stream_is_the_providers_own(upstream: FakeUpstream, start_proxy: Any) -> None:
    """The provider's events are relayed as they came (its message id, its signature
    deltas), under the model name the client asked for; the reply is stored signed."""
    url = start_proxy(claude_config(upstream))
    thinking = [{"type": "thinking", "thinking": "Tides follow the moon.", "signature": SIGNATURE}]
    upstream.queue(Reply(content="At six.", thinking=thinking))
    question = {"role": "user", "content": "When is high tide?"}
    with client(url, "native-stream").messages.stream(
        model=CLAUDE, max_tokens=100, messages=[question]
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert final.id.startswith("msg_test_")  # the provider's own id
    assert final.model == CLAUDE
    assert [block.type for block in final.content] == ["thinking", "text"]
    assert final.content[0].signature == SIGNATURE
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    stored = stored_session(url, "/v1/sessions/native-stream").json()["messages"]
    assert stored[1]["content"] == "At six."
    assert stored[1]["thinking_blocks"] == thinking


def test_native_api_false_keeps_the_chat_translation(upstream: FakeUpstream, start_proxy: Any):
    config = claude_config(upstream)
    config["model_list"][-1]["model_info"] = {"native_api": False}
    url = start_proxy(config)
    client(url, "translated").messages.create(
        model=CLAUDE, max_tokens=50, messages=[{"role": "user", "content": "hello"}]
    )
    sent = upstream.messages_requests()[-1].body
    # LiteLLM's chat translation writes a user message's text as blocks; a session's
    # turn that sets no cache marks gets the proxy's (`proxy.engine.planner.caching`).
    assert sent["messages"][0]["content"] == [
        {"type": "text", "text": "hello", "cache_control": EPHEMERAL}
    ]


SEARCH_CALL = {
    "type": "server_tool_use",
    "id": "srvtoolu_1",
    "name": "web_search",
    "input": {"query": "tide tables Brest"},
}
SEARCH_RESULT = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_1",
    "content": [
        {
            "type": "web_search_result",
            "url": "https://example.org/tides",
            "title": "Tides",
            "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5",
        }
    ],
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_server_tools_turn_goes_back_as_it_came(
    upstream: FakeUpstream, start_proxy: Any, stream: bool
) -> None:
    """A server tool (web search) is forwarded; the turn it makes (the call, its result,
    then text) is answered, stored, and sent back whole on the next turn."""
    url = start_proxy(claude_config(upstream))
    upstream.queue(Reply(content="High tide is at six.", blocks=[SEARCH_CALL, SEARCH_RESULT]))
    sdk = client(url, f"server-tool-{stream}")
    tools = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 1}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "When is high tide in Brest?"}]
    if stream:
        with sdk.messages.stream(
            model=CLAUDE, max_tokens=200, tools=tools, messages=messages
        ) as events:
            first = events.get_final_message()
    else:
        first = sdk.messages.create(model=CLAUDE, max_tokens=200, tools=tools, messages=messages)
    assert upstream.messages_requests()[-1].body["tools"] == tools
    turn = [block.model_dump(exclude_none=True) for block in first.content]
    assert turn[:2] == [SEARCH_CALL, SEARCH_RESULT]
    stored = stored_session(url, f"/v1/sessions/server-tool-{stream}").json()["messages"]
    assert stored[1]["anthropic_content"] == turn
    messages += [
        {"role": "assistant", "content": turn},
        {"role": "user", "content": "And low tide?"},
    ]
    second = sdk.messages.create(model=CLAUDE, max_tokens=200, tools=tools, messages=messages)
    assert second.content[-1].text == "echo: And low tide?"
    assert upstream.messages_requests()[-1].body["messages"][1] == messages[1]
