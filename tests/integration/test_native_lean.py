"""The lean call on the doors' own APIs (`proxy.upstream.native.NativeClient`): what it
sends is what LiteLLM's route sends, byte for byte in meaning and header for header; the
Router around it still retries, falls back, keeps the provider's Retry-After, holds the
one deadline and benches no deployment for a rejected key; and a request holding what
LiteLLM's route would repair takes that route. The loopback upstream speaks both APIs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.integration.test_messages import CLAUDE, SIGNATURE, claude_config
from tests.integration.test_native_responses import NATIVE, native_config
from tests.proxies import UPSTREAM_KEY
from tests.upstream import FakeUpstream, Received, Reply

KEY = "native-lean-key-0123456789"
HEADERS = {"authorization": f"Bearer {KEY}"}
EPHEMERAL = {"type": "ephemeral"}
OBJECT = {"type": "object"}
# Headers the provider reads (the transport's own, such as user-agent, may differ).
PROVIDER_HEADERS = ("x-api-key", "authorization", "anthropic-version", "anthropic-beta")


def config(upstream: FakeUpstream, lean: bool, **sections: Any) -> dict[str, Any]:
    """CLAUDE on the upstream's Messages API and NATIVE on its Responses API."""
    server = {"lean_upstream": lean, **sections.pop("server", {})}
    made = claude_config(upstream, server=server, auth={"keys": [{"key": KEY}]})
    made["model_list"] += native_config(upstream)["model_list"]
    return made | sections


def claude_code_turn() -> tuple[str, dict[str, Any]]:
    """A Messages request as Claude Code sends one mid tool loop: system blocks with a
    cache mark, tools, adaptive thinking and an effort, context management, metadata,
    signed thinking, a tool call and its result."""
    use = {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"path": "a.py"}}
    thinking = {"type": "thinking", "thinking": "Read it first.", "signature": SIGNATURE}
    result = {"type": "tool_result", "tool_use_id": "toolu_01", "content": "print(1)"}
    body = {
        "model": CLAUDE,
        "max_tokens": 32000,
        "system": [
            {"type": "text", "text": "You are Claude Code."},
            {"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL},
        ],
        "tools": [
            {"name": "Read", "description": "Read a file", "input_schema": {"type": "object"}}
        ],
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": "user_1"},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What does a.py print?"}]},
            {"role": "assistant", "content": [thinking, use]},
            {"role": "user", "content": [result | {"cache_control": EPHEMERAL}]},
        ],
    }
    return "/v1/messages", body


def codex_turn() -> tuple[str, dict[str, Any]]:
    """A Responses request as Codex sends one: reasoning with its encrypted content, a
    call and its output, function and hosted tools, `include`, `client_metadata`."""
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"}
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell"}
    body = {
        "model": NATIVE,
        "instructions": "You are Codex.",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ls"}]},
            reasoning,
            call | {"arguments": '{"cmd":"ls"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "main.py"},
        ],
        "tools": [
            {"type": "function", "name": "shell", "parameters": {"type": "object"}},
            {"type": "web_search"},
        ],
        "tool_choice": "auto",
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "client_metadata": {"originator": "codex_exec"},
        "prompt_cache_key": "codex-lean",
    }
    return "/v1/responses", body


TURNS = {"messages": claude_code_turn, "responses": codex_turn}


def sent(upstream: FakeUpstream, door: str) -> list[Received]:
    return upstream.messages_requests() if door == "messages" else upstream.responses_requests()


def post(url: str, door: str, session: str, stream: bool = False) -> httpx.Response:
    path, body = TURNS[door]()
    headers = HEADERS | {"x-session-id": session}
    return httpx.post(url + path, json=body | {"stream": stream}, headers=headers, timeout=30)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("door", ["messages", "responses"])
def test_the_lean_call_sends_what_litellms_route_sends(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str], door: str, stream: bool
) -> None:
    """The same turn through both paths reaches the provider as the same request: body
    (parameters translated for the model, the window, the carried fields) and the
    headers the provider reads (key, version, the beta headers its features need)."""
    received = []
    for lean in (True, False):
        url = start_proxy(config(upstream, lean))
        response = post(url, door, f"same-{door}-{lean}", stream)
        assert response.status_code == 200, response.text
        received.append(sent(upstream, door)[-1])
    ours, litellms = received
    assert ours.body == litellms.body
    for name in PROVIDER_HEADERS:
        assert ours.headers.get(name) == litellms.headers.get(name), name
    if door == "messages":  # the provider's key, never the caller's
        assert ours.headers["x-api-key"] == UPSTREAM_KEY
        assert "context-management" in ours.headers["anthropic-beta"]
    else:
        assert ours.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"


@pytest.mark.parametrize("door", ["messages", "responses"])
def test_the_router_falls_back_from_a_failing_deployment(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str], door: str
) -> None:
    model = CLAUDE if door == "messages" else NATIVE
    made = config(upstream, True, router_settings={"num_retries": 0})
    backup = next(e for e in made["model_list"] if e["model_name"] == model)
    made["model_list"].append(backup | {"model_name": "backup"})
    made["router_settings"]["fallbacks"] = [{model: ["backup"]}]
    url = start_proxy(made)
    upstream.queue(Reply(status=500, error_message="overloaded"))
    response = post(url, door, f"fallback-{door}")
    assert response.status_code == 200, response.text
    assert len(sent(upstream, door)) == 2  # the failed call, then its fallback


@pytest.mark.parametrize("door", ["messages", "responses"])
def test_a_429_keeps_the_providers_retry_after_and_stores_nothing(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str], door: str
) -> None:
    url = start_proxy(config(upstream, True))
    headers = {"retry-after": "17"}
    upstream.queue(Reply(status=429, error_message="slow down", headers=headers))
    response = post(url, door, f"limited-{door}")
    assert response.status_code == 429, response.text
    assert "slow down" in response.text and UPSTREAM_KEY not in response.text
    assert response.headers["retry-after"] == "17"
    stored = httpx.get(f"{url}/v1/sessions/limited-{door}", headers=HEADERS)
    assert stored.status_code == 404


@pytest.mark.parametrize("door", ["messages", "responses"])
def test_a_stalled_provider_is_504_within_one_deadline(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str], door: str
) -> None:
    """`request_timeout_seconds` bounds the call with its retries."""
    made = config(upstream, True, server={"request_timeout_seconds": 1.0})
    url = start_proxy(made | {"router_settings": {"num_retries": 2, "retry_after": 0}})
    upstream.queue(*[Reply(stall_seconds=5)] * 3)
    began = time.monotonic()
    response = post(url, door, f"stalled-{door}")
    assert response.status_code == 504, response.text
    assert time.monotonic() - began < 2.5  # three attempts of 1 s each would take 3


@pytest.mark.parametrize("door", ["messages", "responses"])
def test_a_rejected_key_benches_no_deployment(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str], door: str
) -> None:
    url = start_proxy(config(upstream, True))
    upstream.queue(Reply(status=401, error_message="invalid x-api-key"))
    assert post(url, door, f"rejected-{door}").status_code == 401
    assert post(url, door, f"rejected-{door}").status_code == 200  # the only deployment


def test_what_litellms_route_repairs_takes_that_route(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str]
) -> None:
    """An empty text block beside a tool call (which Anthropic refuses, and clients loop
    back) reaches the provider without it: such a request takes LiteLLM's route."""
    url = start_proxy(config(upstream, True))
    path, body = claude_code_turn()
    body["messages"][1]["content"].insert(0, {"type": "text", "text": ""})
    headers = HEADERS | {"x-session-id": "repaired"}
    response = httpx.post(url + path, json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    blocks = upstream.messages_requests()[-1].body["messages"][1]["content"]
    assert [block["type"] for block in blocks] == ["thinking", "tool_use"]
