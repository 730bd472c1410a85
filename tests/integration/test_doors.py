"""One session, continued through each of the three doors in turn."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai

from tests.integration.test_messages import CLAUDE, claude_config
from tests.proxies import MODEL
from tests.upstream import FakeUpstream

HEADERS = {"X-Session-Id": "doors"}


def test_a_session_switches_doors_mid_conversation(upstream: FakeUpstream, start_proxy: Any):
    """Chat, then Messages (the same history, in Anthropic's shape), then Responses
    (only the new turn): every message stored once, and each upstream request carries
    the whole conversation so far, whichever door it came through."""
    url = start_proxy(claude_config(upstream))
    chat = openai.OpenAI(base_url=url + "/v1", api_key="k-doors", default_headers=HEADERS)
    claude = anthropic.Anthropic(base_url=url, api_key="k-doors", default_headers=HEADERS)

    first = (
        chat.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "one"}])
        .choices[0]
        .message.content
    )
    assert first == "echo: one"

    history = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": [{"type": "text", "text": first}]},
        {"role": "user", "content": "two"},
    ]
    second = claude.messages.create(model=CLAUDE, max_tokens=50, messages=history)
    assert second.content[0].text == "echo: two"
    sent = upstream.messages_requests()[-1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]

    third = chat.responses.create(model=MODEL, input="three")
    assert third.output_text == "echo: three"
    sent = upstream.chat_requests()[-1].body["messages"]
    assert [m["content"] for m in sent] == ["one", "echo: one", "two", "echo: two", "three"]

    stored = httpx.get(f"{url}/v1/sessions/doors", headers={"x-api-key": "k-doors"}).json()
    contents = [m["content"] for m in stored["messages"]]
    assert len(contents) == 6  # each turn once, whichever door it came through
    assert contents[-1] == "echo: three"
