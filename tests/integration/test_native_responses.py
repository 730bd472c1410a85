"""The Responses door in OpenAI's own API: to an OpenAI deployment (at OpenAI's address,
or one whose `model_info` says `native_api: true`) the planned window goes in that API
as input items, reasoning and hosted tools included, on both paths (the proxy's lean
call and LiteLLM's Responses route). The loopback upstream speaks the Responses API."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxy.http.headers import DROPPED
from tests.integration.test_native_messages import start_proxy  # noqa: F401 (both paths)
from tests.integration.test_responses import sdk
from tests.proxies import MODEL, UPSTREAM_KEY, proxy_config
from tests.upstream import FakeUpstream, Reply
from tests.upstream_responses import last_user_text

NATIVE = "gpt-native"
NO_REASONING = "gpt-native-mini"
REASONING = {
    "type": "reasoning",
    "id": "rs_test_1",
    "summary": [],
    "encrypted_content": "gAAAAABpZmVuY3J5cHRlZA==",
}


def native_config(upstream: FakeUpstream, **sections: Any) -> dict[str, Any]:
    """NATIVE (a reasoning model) and NO_REASONING on the test upstream's Responses API."""
    config = proxy_config(upstream, **sections)
    for name, model in ((NATIVE, "gpt-5-mini"), (NO_REASONING, MODEL)):
        params = {"model": f"openai/{model}", "api_base": upstream.base_url}
        config["model_list"].append(
            {
                "model_name": name,
                "litellm_params": params | {"api_key": UPSTREAM_KEY},
                "model_info": {"native_api": True},
            }
        )
    return config


@pytest.fixture
def url_config(upstream: FakeUpstream) -> dict[str, Any]:
    return native_config(upstream)


def stored(url: str, session: str) -> list[dict[str, Any]]:
    headers = {"Authorization": "Bearer client-key"}
    return httpx.get(f"{url}/v1/sessions/{session}", headers=headers).json()["messages"]


CODEX_INPUT: list[dict[str, Any]] = [
    {"type": "message", "role": "developer", "content": "Sandbox: workspace-write."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List."}]},
    REASONING,
    {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": '{"cmd":"ls"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "main.py"},
]


def test_a_codex_turn_reaches_openai_as_sent(url: str, upstream: FakeUpstream) -> None:
    """Reasoning with its encrypted content, hosted and namespace tools, `include`,
    `store`, `client_metadata`: all as Codex sent them (its `prompt_cache_key` as a key
    of its tenant's); nothing dropped."""
    tools = [
        {"type": "function", "name": "shell", "parameters": {"type": "object"}},
        {"type": "web_search"},
        {"type": "namespace", "name": "mcp__files", "tools": []},
    ]
    body = {
        "model": NATIVE,
        "instructions": "You are Codex.",
        "input": CODEX_INPUT,
        "tools": tools,
        "tool_choice": "auto",
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "client_metadata": {"originator": "codex_exec"},
        "prompt_cache_key": "codex-native-1",
    }
    headers = {"Authorization": "Bearer client-key"}
    response = httpx.post(url + "/v1/responses", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert DROPPED not in response.headers
    sent = upstream.responses_requests()[-1].body
    for name in ("instructions", "input", "tools", "reasoning", "include", "store"):
        assert sent[name] == body[name], name
    assert sent["client_metadata"] == body["client_metadata"]
    key = sent["prompt_cache_key"]  # Codex's key, made the caller's tenant's
    assert key.startswith("ctx-") and "codex" not in key
    assert response.json()["output"][0]["content"][0]["text"] == "echo: List."
    turn = stored(url, "codex-native-1")  # the developer message leads: not stored
    assert turn[1]["responses_output"] == [REASONING, CODEX_INPUT[3]]


def test_previous_response_id_sends_the_whole_window(url: str, upstream: FakeUpstream) -> None:
    """The proxy serves `previous_response_id` from its own store: the provider gets the
    whole conversation, reasoning items in place, and never the id."""
    upstream.queue(Reply(content="Hello Ada.", blocks=[REASONING]))
    client = sdk(url)
    first = client.responses.create(model=NATIVE, instructions="Be brief.", input="I am Ada")
    assert first.output[0].type == "reasoning"
    assert first.output_text == "Hello Ada." and first.model == NATIVE
    second = client.responses.create(
        model=NATIVE, instructions="Be brief.", input="Who am I?", previous_response_id=first.id
    )
    assert second.output_text == "echo: Who am I?"
    sent = upstream.responses_requests()[-1].body
    assert "previous_response_id" not in sent
    assert [item.get("type", "message") for item in sent["input"]] == [
        "message",
        "reasoning",
        "message",
        "message",
    ]
    assert sent["input"][1] == REASONING
    assert sent["input"][2]["content"][0]["text"] == "Hello Ada."


def test_the_stream_is_the_providers_own(url: str, upstream: FakeUpstream) -> None:
    """OpenAI's events relayed, the response under the proxy's id; the finished turn is
    stored, reasoning and all, and continues."""
    upstream.queue(Reply(content="one two three", blocks=[REASONING]))
    client = sdk(url)
    events = list(client.responses.create(model=NATIVE, input="count", stream=True))
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_item.added" in kinds
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "one two three"
    done = events[-1].response
    assert done.id == events[0].response.id and done.model == NATIVE
    follow = client.responses.create(model=NATIVE, input="again", previous_response_id=done.id)
    assert follow.status == "completed"
    assert upstream.responses_requests()[-1].body["input"][1] == REASONING


def test_a_client_that_hangs_up_at_response_completed_has_its_turn_stored(
    url: str, upstream: FakeUpstream
) -> None:
    """Codex stops reading at `response.completed`: the turn is stored before that
    event goes out, so its leaving cancels nothing (long replies: storing one takes a
    while, counting its tokens)."""
    headers = {"Authorization": "Bearer client-key", "X-Session-Id": "hangs-up"}
    long = " ".join(f"w{i}" for i in range(100_000))
    upstream.default = Reply(respond=lambda body: f"{long} reply {last_user_text(body)[-1]}")
    for n in range(2):
        body = {"model": NATIVE, "input": f"turn {n}", "stream": True}
        with httpx.stream(
            "POST", url + "/v1/responses", json=body, headers=headers, timeout=30
        ) as response:
            for line in response.iter_lines():
                if line == "event: response.completed":
                    break  # and leave, as Codex does
        said = [m["content"] for m in stored(url, "hangs-up") if m["role"] == "assistant"]
        assert [text[-7:] for text in said] == [f"reply {i}" for i in range(n + 1)]


def test_other_deployments_keep_the_chat_translation(url: str, upstream: FakeUpstream) -> None:
    """An OpenAI-compatible server elsewhere than OpenAI's address may not serve
    `/responses`: without `native_api: true` it gets chat completions."""
    reply = sdk(url).responses.create(model=MODEL, input="hello")
    assert reply.output_text == "echo: hello"
    assert upstream.requests[-1].path.endswith("/chat/completions")


def test_a_model_without_reasoning_is_not_sent_it(url: str, upstream: FakeUpstream) -> None:
    """`reasoning` to a model that takes none (LiteLLM's list): dropped and said."""
    body = {"model": NO_REASONING, "input": "hi", "reasoning": {"effort": "low"}}
    headers = {"Authorization": "Bearer client-key"}
    response = httpx.post(url + "/v1/responses", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers[DROPPED] == "reasoning"
    assert "reasoning" not in upstream.responses_requests()[-1].body


@pytest.mark.parametrize("shape", [b"null", b'{"choices": 5}', b'{"output": 5}', b"[]"])
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/messages", {"max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/responses", {"input": "hi"}),
    ],
)
def test_a_reply_not_of_the_apis_shape_is_a_502(
    url: str, upstream: FakeUpstream, path: str, body: dict[str, Any], shape: bytes
) -> None:
    """A provider that answers 200 with what its API never returns failed: an error of the
    provider's (a 5xx, never the proxy's own "internal error") on every door, nothing of
    the proxy's insides, nothing stored."""
    upstream.queue(Reply(raw=shape))
    headers = {"Authorization": "Bearer client-key", "X-Session-Id": f"shape-{path}-{shape!r}"}
    answer = httpx.post(url + path, json={"model": NATIVE, **body}, headers=headers, timeout=30)
    assert answer.status_code in (500, 502), answer.text
    message = answer.json()["error"]["message"]
    assert "context-proxy" not in message and "Traceback" not in message, message
    assert "Error" not in message and ".py" not in message, message
    assert (
        httpx.get(f"{url}/v1/sessions/{headers['X-Session-Id']}", headers=headers).status_code
        == 404
    )
