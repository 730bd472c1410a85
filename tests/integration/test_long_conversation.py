"""A 300-turn conversation through a 4,096-token model: the product's promise, end to end."""

from __future__ import annotations

import httpx
import pytest

from tests.door_clients import door_client
from tests.marathon import (
    BUDGET,
    SYSTEM,
    TAG,
    TURNS,
    WINDOW,
    is_summarizer,
    new_part,
    respond,
    run,
    user_text,
)
from tests.proxies import MODEL, proxy_config
from tests.upstream import FakeUpstream, Reply, count_prompt_tokens


@pytest.mark.parametrize("door", ["chat", "messages", "responses"])
def test_three_hundred_turns_stay_within_budget(
    upstream: FakeUpstream, start_proxy, door: str
) -> None:
    """The same conversation through each door: Chat Completions and Messages resend
    the whole history each turn, Responses chains `previous_response_id`."""
    config = proxy_config(upstream)
    config["model_list"][0]["model_info"] = {"max_input_tokens": WINDOW}
    url = start_proxy(config)
    upstream.default = Reply(respond=respond)
    client = door_client(door, url, "client-key", {"X-Session-Id": "marathon"})
    history = run(client, MODEL)

    received = [r.body for r in upstream.chat_requests()]
    model_calls = [b for b in received if not is_summarizer(b)]
    summarizer_calls = [b for b in received if is_summarizer(b)]
    assert len(model_calls) == TURNS + TURNS // 10

    sent_last_user = None
    for body in model_calls:
        # Within 80% of the window, counted by tiktoken on what actually arrived.
        assert count_prompt_tokens(body) <= BUDGET
        messages = body["messages"]
        assert messages[0] == SYSTEM
        # The newest user message arrives verbatim.
        last_user = next(m for m in reversed(messages) if m["role"] == "user")
        assert TAG.match(last_user["content"])
        if sent_last_user is not None:
            assert int(TAG.match(last_user["content"]).group(1)) >= sent_last_user
        sent_last_user = int(TAG.match(last_user["content"]).group(1))
        assert last_user["content"] == user_text(sent_last_user)
        # Every tool call has its result and every result its call; none leads.
        assert messages[1]["role"] != "tool"
        calls = {c["id"] for m in messages for c in m.get("tool_calls") or []}
        results = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
        assert calls == results

    # Compression really happened, with a summary, in big steps.
    assert summarizer_calls
    assert len(summarizer_calls) < TURNS / 5
    assert any(
        m["content"].startswith("Summary of the earlier conversation:")
        for b in model_calls[-10:]
        for m in b["messages"]
        if m["role"] == "system"
    )
    # The summarizer never receives the same message twice...
    seen: dict[int, int] = {}
    for body in summarizer_calls:
        for tag in set(TAG.findall(new_part(body["messages"][-1]["content"]))):
            seen[int(tag)] = seen.get(int(tag), 0) + 1
    assert seen and max(seen.values()) == 1, {t: n for t, n in seen.items() if n > 1}
    # ...so its total input grows linearly with the conversation, not quadratically.
    summarizer_input = sum(count_prompt_tokens(b) for b in summarizer_calls)
    conversation_tokens = count_prompt_tokens({"messages": history})
    assert summarizer_input <= conversation_tokens + len(summarizer_calls) * 1200

    # The whole conversation is kept, intact.
    stored = httpx.get(
        url + "/v1/sessions/marathon", headers={"authorization": "Bearer client-key"}
    ).json()
    assert stored["stats"]["messages"] == len(history)
    for kept, sent in zip(stored["messages"], history, strict=True):
        assert kept["role"] == sent["role"]
        assert kept.get("content") == sent.get("content")
        assert [c["id"] for c in kept.get("tool_calls") or []] == [
            c["id"] for c in sent.get("tool_calls") or []
        ]
    print(
        f"\n{len(model_calls)} model calls, {len(summarizer_calls)} summarizer calls, "
        f"conversation {conversation_tokens} tokens, summarizer input {summarizer_input} tokens"
    )
