"""Tolerant doors: what coding agents send beyond the published APIs is translated where
it maps onto a chat parameter, carried to a provider that takes it, and otherwise
dropped, counted and said in `X-Context-Dropped`; never a 400."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxy.doors.anthropic.render import SYSTEM_NOTE
from proxy.http.headers import DROPPED
from tests.integration.test_messages import CLAUDE, claude_config
from tests.proxies import MODEL
from tests.upstream import FakeUpstream

# What Claude Code 2.1 sends beside the Messages API's own fields (seen on the wire).
CLAUDE_CODE_EXTRAS: dict[str, Any] = {
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "high"},
    "thinking": {"type": "adaptive", "display": "omitted"},
    "metadata": {"user_id": "device-1_session-7"},
}
READ_TOOL = {
    "name": "Read",
    "description": "Reads a file.",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}


@pytest.fixture
def url_config(upstream: FakeUpstream) -> dict[str, Any]:
    config = claude_config(upstream)
    # Claude Code's default model family: adaptive thinking and an effort level (by
    # LiteLLM's model map, which translates them down for an older Claude).
    config["model_list"][-1]["litellm_params"]["model"] = "anthropic/claude-sonnet-4-6"
    return config


def post(url: str, path: str, body: dict[str, Any], session: str = "vendor-1") -> httpx.Response:
    headers = {"Authorization": "Bearer client-key", "X-Session-Id": session}
    return httpx.post(url + path, json=body, headers=headers, timeout=30)


def dropped(response: httpx.Response) -> list[str]:
    return response.headers.get(DROPPED, "").split(", ") if DROPPED in response.headers else []


def messages_body(model: str, **more: Any) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": 512,
        "system": "You are a coding agent.",
        "messages": [
            {"role": "user", "content": "Read main.py."},
            {"role": "assistant", "content": "Reading it."},
            {"role": "system", "content": "The user is on the main branch."},
            {"role": "user", "content": "Now fix it."},
        ],
        "tools": [READ_TOOL, WEB_SEARCH],
        **CLAUDE_CODE_EXTRAS,
        **more,
    }


def test_claude_codes_request_reaches_an_anthropic_deployment(
    url: str, upstream: FakeUpstream
) -> None:
    """In Anthropic's own API (LiteLLM's Messages route): every field as Claude Code sent
    it, the server tool too; nothing dropped."""
    response = post(url, "/v1/messages", messages_body(CLAUDE))
    assert response.status_code == 200, response.text
    sent = upstream.messages_requests()[-1].body
    for name in ("context_management", "output_config", "thinking", "metadata"):
        assert sent[name] == CLAUDE_CODE_EXTRAS[name], name
    assert sent["tools"] == [READ_TOOL, WEB_SEARCH]
    # The mid-conversation system message stays in its place among the turns: as a
    # labelled user turn, since Anthropic refuses the role there before Claude 4.8.
    assert sent["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "text", "text": SYSTEM_NOTE},
            {"type": "text", "text": "The user is on the main branch."},
        ],
    }
    assert dropped(response) == []


def test_a_claude_that_takes_system_messages_mid_conversation_gets_them_as_they_came(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    config = claude_config(upstream)
    config["model_list"][-1]["litellm_params"]["model"] = "anthropic/claude-opus-4-8"
    url = start_proxy(config)
    response = post(url, "/v1/messages", messages_body(CLAUDE), session="vendor-mid")
    assert response.status_code == 200, response.text
    sent = upstream.messages_requests()[-1].body
    assert sent["messages"][2] == {"role": "system", "content": "The user is on the main branch."}


def test_the_same_request_to_an_openai_deployment(url: str, upstream: FakeUpstream) -> None:
    body = messages_body(MODEL, output_config={"effort": "low", "format": SCHEMA})
    response = post(url, "/v1/messages", body, session="vendor-2")
    assert response.status_code == 200, response.text
    sent = upstream.requests[-1].body
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": SCHEMA["schema"]},
    }
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["system", "user", "assistant", "system", "user"], roles
    # gpt-4o-mini takes no reasoning effort and no context management (LiteLLM's list).
    assert "reasoning_effort" not in sent and "context_management" not in sent
    assert dropped(response) == [
        "metadata",  # Anthropic's own: it names the session here, and is sent to Claude only
        "thinking.adaptive",
        "tools.web_search",
        "reasoning_effort",
        "context_management",
    ]


SCHEMA = {"type": "json_schema", "schema": {"type": "object", "properties": {"title": {}}}}


def test_a_title_side_request_with_an_output_format(url: str, upstream: FakeUpstream) -> None:
    """Claude Code's session-title request: `output_config.format`, no tools."""
    body = {
        "model": CLAUDE,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Title for: fix main.py"}],
        "output_config": {"format": SCHEMA},
        "metadata": {"user_id": "device-1_session-7"},
    }
    response = post(url, "/v1/messages", body, session="vendor-3")
    assert response.status_code == 200, response.text
    assert response.json()["content"][0]["type"] == "text"


def test_codexs_request_through_responses(url: str, upstream: FakeUpstream) -> None:
    body = {
        "model": MODEL,
        "instructions": "You are Codex.",
        "input": [{"type": "message", "role": "user", "content": "List the files."}],
        "tools": [
            {"type": "function", "name": "shell", "parameters": {"type": "object"}},
            {"type": "web_search"},
            {"type": "namespace", "name": "mcp__files", "tools": []},
        ],
        "tool_choice": "auto",
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "client_metadata": {"originator": "codex_exec"},
        "prompt_cache_key": "codex-conversation-1",
        "stream": False,
    }
    response = post(url, "/v1/responses", body, session="vendor-4")
    assert response.status_code == 200, response.text
    sent = upstream.requests[-1].body
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["shell"]
    assert "client_metadata" not in sent and "reasoning_effort" not in sent
    # Chat completions have these too: sent under their own names (the cache key made
    # the caller's tenant's).
    assert sent["store"] is False and sent["prompt_cache_key"].startswith("ctx-")
    assert dropped(response) == [
        "include",
        "client_metadata",
        "tools.web_search",
        "tools.mcp__files",
        "reasoning_effort",
    ]


def test_background_responses_are_still_refused(url: str) -> None:
    """A field the door knows and cannot honour is a 400, not a silent change."""
    body = {"model": MODEL, "input": "hi", "background": True}
    response = post(url, "/v1/responses", body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "background"


def test_dropped_fields_are_counted_by_a_bounded_label(url: str, upstream: FakeUpstream) -> None:
    body = messages_body(MODEL, **{f"x_vendor_{n}": n for n in range(5)})
    assert post(url, "/v1/messages", body, session="vendor-5").status_code == 200
    metrics = httpx.get(url + "/metrics").text
    counted = {
        line.split("{", 1)[1].split("}", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("context_proxy_dropped_fields_total{")
    }
    assert counted['api="messages",field="other"'] >= 5
    assert counted['api="messages",field="tools"'] >= 1
    assert not any("x_vendor" in label for label in counted)


def test_a_thinking_budget_reaches_anthropic_exactly(url: str, upstream: FakeUpstream) -> None:
    """Of `thinking` and the effort level derived from its budget, a model that takes the
    budget gets the budget (not a level LiteLLM would map back to another budget)."""
    thinking = {"type": "enabled", "budget_tokens": 4096}
    body = {
        "model": CLAUDE,
        "max_tokens": 8192,
        "thinking": thinking,
        "messages": [{"role": "user", "content": "Think, then answer."}],
    }
    response = post(url, "/v1/messages", body, session="vendor-6")
    assert response.status_code == 200, response.text
    assert upstream.messages_requests()[-1].body["thinking"] == thinking
    assert dropped(response) == []
    # A model that takes neither: both dropped, and said.
    response = post(url, "/v1/messages", body | {"model": MODEL}, session="vendor-7")
    assert response.status_code == 200, response.text
    assert dropped(response) == ["thinking", "reasoning_effort"]


def test_the_dropped_header_names_only_plain_names_and_not_too_many(url: str) -> None:
    smuggled = {"x\r\nSet-Cookie: stolen": 1, "ünïcode": 2}
    body = messages_body(MODEL, **smuggled, **{f"f{n}": n for n in range(30)})
    response = post(url, "/v1/messages", body, session="vendor-8")
    assert response.status_code == 200, response.text
    assert "set-cookie" not in response.headers
    names = dropped(response)
    assert names[1:3] == ["other", "other"] and names[-1] == "..." and len(names) == 17, names
