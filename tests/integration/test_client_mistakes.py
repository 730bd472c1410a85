"""A client's own mistake is its own: a malformed field is a 400 naming it, and JSON nested
deeper than can be written is a 400 too, on every door, streamed or not, with a session
or without, before any provider is called (and paid). The issue's fuzz found each of
these answered 500 or 502, with LiteLLM's traceback, or a stream cut after its headers."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration.test_messages import CLAUDE, claude_config
from tests.integration.test_native_responses import NATIVE, native_config
from tests.proxies import MODEL
from tests.upstream import FakeUpstream


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"a": 1}
    for _ in range(depth):
        value = {"a": value}
    return value


DEEP = nested(300)
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
CHAT = [{"role": "user", "content": "hi"}]
CALL = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}
ASKED = [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": [CALL]},
]


def answered(content: Any) -> list[dict[str, Any]]:
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": content}
    return [*ASKED, {"role": "user", "content": [result]}]


# (door, body, what the answer must name)
CASES: dict[str, tuple[str, dict[str, Any], str]] = {
    "chat stop of lists": ("/v1/chat/completions", {"stop": [["x"]]}, "stop[0]"),
    "chat tool type 3": ("/v1/chat/completions", {"tools": [{**TOOL, "type": 3}]}, "tools[0]"),
    "chat tool with no type": (
        "/v1/chat/completions",
        {"tools": [{"function": TOOL["function"]}]},
        "tools[0]",
    ),
    "chat parameters 2**63": (
        "/v1/chat/completions",
        {"tools": [{**TOOL, "function": {"name": "f", "parameters": 2**63}}]},
        "tools[0].function.parameters",
    ),
    "chat tool_choice of no name": (
        "/v1/chat/completions",
        {"tools": [TOOL], "tool_choice": {"type": "function", "function": {}}},
        "tool_choice.function",
    ),
    "chat system message without content": (
        "/v1/chat/completions",
        {"messages": [{"role": "system"}, *CHAT]},
        "messages[0].content",
    ),
    "chat tool of no function": (
        "/v1/chat/completions",
        {"tools": [{"type": "function"}]},
        "tools[0].function",
    ),
    "chat tool a number": ("/v1/chat/completions", {"tools": [-1e308]}, "tools[0]"),
    "chat deep response_format": (
        "/v1/chat/completions",
        {"response_format": {"type": "json_object", "x": DEEP}},
        "nested too deeply",
    ),
    "chat deep content part": (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "x": DEEP}]}]},
        "nested too deeply",
    ),
    "responses tool parameters a list": (
        "/v1/responses",
        {"tools": [{"type": "function", "name": "f", "parameters": [1, "x", {}]}]},
        "tools[0].parameters",
    ),
    "responses text.format 3": ("/v1/responses", {"text": {"format": 3}}, "text.format"),
    "responses deep text": ("/v1/responses", {"text": DEEP}, "nested too deeply"),
    "responses deep metadata": ("/v1/responses", {"metadata": DEEP}, "nested too deeply"),
    "messages deep metadata": ("/v1/messages", {"metadata": DEEP}, "nested too deeply"),
    "messages deep tool input": (
        "/v1/messages",
        {"messages": [*ASKED[:1], {"role": "assistant", "content": [{**CALL, "input": DEEP}]}]},
        "nested too deeply",
    ),
    "messages tool_result part without type": (
        "/v1/messages",
        {"messages": answered([{"text": "sunny"}])},
        "messages.2.content.0.content.0",
    ),
    "messages tool_result part not an object": (
        "/v1/messages",
        {"messages": answered(["sunny"])},
        "messages.2.content.0.content.0",
    ),
    "messages stop_sequences of numbers": (
        "/v1/messages",
        {"stop_sequences": [1]},
        "stop_sequences[0]",
    ),
    "messages tool schema a list": (
        "/v1/messages",
        {"tools": [{"name": "weather", "input_schema": [1, 2]}]},
        "tools.0.input_schema",
    ),
    "messages server tool type 3": (
        "/v1/messages",
        {"tools": [{"type": 3, "name": "search"}]},
        "tools.0.type",
    ),
}
MODELS = {
    "/v1/chat/completions": [MODEL, CLAUDE],
    "/v1/responses": [NATIVE, CLAUDE],
    "/v1/messages": [CLAUDE],
}


@pytest.fixture(scope="module")
def proxy(module_url: str) -> str:
    return module_url


@pytest.fixture(scope="module")
def module_url_config(_shared_upstream: FakeUpstream) -> dict[str, Any]:
    config = claude_config(_shared_upstream)
    config["model_list"] += native_config(_shared_upstream)["model_list"][1:2]
    return config


def request(path: str, model: str, change: dict[str, Any], stream: bool) -> dict[str, Any]:
    if path == "/v1/messages":
        base: dict[str, Any] = {"model": model, "max_tokens": 20, "messages": CHAT}
    elif path == "/v1/responses":
        base = {"model": model, "input": "hi"}
    else:
        base = {"model": model, "messages": CHAT}
    return base | change | ({"stream": True} if stream else {})


def said(answer: httpx.Response) -> str:
    """What an error answer names: its message, and its `param` where it has one."""
    error = answer.json()["error"]
    return f"{error['message']} {error.get('param') or ''}"


@pytest.mark.parametrize("case", list(CASES))
def test_a_malformed_field_is_a_400_naming_it_before_any_call(
    proxy: str, upstream: FakeUpstream, case: str
) -> None:
    path, change, named = CASES[case]
    for model in MODELS[path]:
        for stream in (False, True):
            for session in (None, f"mistakes-{case}-{model}-{stream}"):
                headers = {"authorization": "Bearer client-key"}
                if session:
                    headers["x-session-id"] = session
                before = len(upstream.requests)
                body = request(path, model, change, stream)
                answer = httpx.post(proxy + path, json=body, headers=headers, timeout=30)
                where = (model, stream, session)
                assert answer.status_code == 400, (where, answer.text)
                assert named in said(answer), (where, answer.text)
                for word in ("Traceback", ".py", "litellm", "Error -", "Exception"):
                    assert word not in answer.text, (where, answer.text)
                assert len(upstream.requests) == before, (where, "a provider was called")
                if path == "/v1/messages":  # and count_tokens reads the same request
                    counted = httpx.post(
                        proxy + "/v1/messages/count_tokens", json=body, headers=headers
                    )
                    assert counted.status_code == 400, (where, counted.text)


# A tool call whose `arguments` are not JSON (a model may write such: OpenAI takes any
# string there), answered, in a conversation that goes on.
UNREADABLE = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "x"}}
UNREADABLE_CHAT = [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": None, "tool_calls": [UNREADABLE]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    {"role": "user", "content": "and tomorrow?"},
]
UNREADABLE_INPUT = [
    {"type": "message", "role": "user", "content": "weather?"},
    {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "x"},
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    {"type": "message", "role": "user", "content": "and tomorrow?"},
]


def test_tool_call_arguments_claude_cannot_read_are_a_400_not_the_providers_failure(
    proxy: str, upstream: FakeUpstream
) -> None:
    """Claude takes a tool call's arguments as an object: arguments that are not JSON
    cannot be put in its API. A 400 saying so (it was a 502 "The provider's answer was
    not JSON." though no provider was asked: the fuzz's F18), on the chat and Responses
    doors, streamed or not, with a session or not; Claude is not benched for it. An
    OpenAI model takes the same conversation as it is."""
    tools = [TOOL]
    bodies = {
        "/v1/chat/completions": {"messages": UNREADABLE_CHAT, "tools": tools},
        "/v1/responses": {"input": UNREADABLE_INPUT, "tools": [{"type": "function", "name": "f"}]},
    }
    headers = {"authorization": "Bearer client-key"}
    for path, change in bodies.items():
        for stream in (False, True):
            for session in (None, f"unreadable-{path}-{stream}"):
                where = (path, stream, session)
                sent = headers | ({"x-session-id": session} if session else {})
                body = request(path, CLAUDE, change, stream)
                before = len(upstream.requests)
                answer = httpx.post(proxy + path, json=body, headers=sent, timeout=30)
                assert answer.status_code == 400, (where, answer.text)
                assert "tool call arguments" in said(answer), (where, answer.text)
                assert "tomorrow" not in answer.text, (where, "the window quoted back")
                for word in ("Traceback", ".py", "litellm", "Exception"):
                    assert word not in answer.text, (where, answer.text)
                assert len(upstream.requests) == before, (where, "a provider was called")
    fine = request("/v1/chat/completions", CLAUDE, {}, False)
    assert httpx.post(proxy + "/v1/chat/completions", json=fine, headers=headers).status_code == 200
    body = request("/v1/chat/completions", MODEL, bodies["/v1/chat/completions"], False)
    answer = httpx.post(proxy + "/v1/chat/completions", json=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    call = upstream.chat_requests()[-1].body["messages"][1]["tool_calls"][0]
    assert call["function"]["arguments"] == "x"
