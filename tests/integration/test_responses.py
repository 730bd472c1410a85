"""The OpenAI Responses door, through the openai SDK's `client.responses`."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote

import httpx
import openai
import pytest

from tests.proxies import MODEL, proxy_config
from tests.upstream import FakeUpstream, Reply, count_prompt_tokens


def sdk(url: str, key: str = "client-key", **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=url + "/v1", api_key=key, max_retries=0, default_headers=headers, timeout=30
    )


def weather_call(call_id: str) -> dict[str, Any]:
    function = {"name": "weather", "arguments": '{"city": "Oslo"}'}
    return {"id": call_id, "type": "function", "function": function}


TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "weather",
        "description": "Weather by city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


def test_previous_response_id_continues_from_the_proxys_store(
    url: str, upstream: FakeUpstream
) -> None:
    """No session header: the response id alone carries the conversation, which the
    proxy serves from its own store for a backend that has no Responses API."""
    client = sdk(url)
    first = client.responses.create(model=MODEL, instructions="Be brief.", input="my name is Ada")
    assert first.output_text == "echo: my name is Ada"
    assert first.status == "completed" and first.usage.input_tokens > 0
    second = client.responses.create(
        model=MODEL,
        instructions="Be brief.",
        input="what is my name?",
        previous_response_id=first.id,
    )
    assert second.output_text == "echo: what is my name?"
    sent = upstream.chat_requests()[-1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[1]["content"] == "my name is Ada"
    assert sent[2]["content"] == "echo: my name is Ada"


def test_function_calls_round_trip(url: str, upstream: FakeUpstream) -> None:
    upstream.queue(Reply(content="Let me check.", tool_calls=[weather_call("call_7")]))
    upstream.queue(Reply(content="It is cold."))
    client = sdk(url)
    first = client.responses.create(model=MODEL, input="Weather in Oslo?", tools=TOOLS)
    kinds = [item.type for item in first.output]
    assert kinds == ["message", "function_call"]
    call = first.output[1]
    assert (call.call_id, call.name, call.arguments) == ("call_7", "weather", '{"city": "Oslo"}')
    output = {"type": "function_call_output", "call_id": "call_7", "output": "-5 C"}
    second = client.responses.create(
        model=MODEL, input=[output], tools=TOOLS, previous_response_id=first.id
    )
    assert second.output_text == "It is cold."
    sent = upstream.chat_requests()[-1].body
    assert sent["tools"][0]["function"]["name"] == "weather"
    assistant, result = sent["messages"][-2:]
    assert assistant["tool_calls"][0]["id"] == "call_7"
    assert assistant["content"] == "Let me check."
    assert result == {"role": "tool", "tool_call_id": "call_7", "content": "-5 C"}


def test_full_input_items_with_a_session_header(url: str, upstream: FakeUpstream) -> None:
    """A client that resends every item (Codex with `store: false`) under a session
    header: each item is stored once, the function call joined to its turn's text."""
    upstream.queue(Reply(content="ok"), Reply(content="done"))
    client = sdk(url, **{"X-Session-Id": "items"})
    items: list[Any] = [{"role": "user", "content": "start"}]
    first = client.responses.create(model=MODEL, input=items, store=False)
    items += [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": first.output_text}],
        },
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"role": "user", "content": [{"type": "input_text", "text": "and now?"}]},
    ]
    client.responses.create(model=MODEL, input=items, store=False, tools=TOOLS)
    stored = httpx.get(
        f"{url}/v1/sessions/items", headers={"Authorization": "Bearer client-key"}
    ).json()["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "user", "assistant"]
    assert stored[1]["tool_calls"][0]["id"] == "c1"


def test_streaming_events(url: str, upstream: FakeUpstream) -> None:
    upstream.queue(Reply(content="one two three", tool_calls=[weather_call("call_9")]))
    client = sdk(url)
    events = list(client.responses.create(model=MODEL, input="count", tools=TOOLS, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "one two three"
    done = events[-1].response
    assert done.output_text == "one two three"
    assert done.output[1].call_id == "call_9" and done.output[1].arguments == '{"city": "Oslo"}'
    follow = client.responses.create(
        model=MODEL,
        input=[{"type": "function_call_output", "call_id": "call_9", "output": "rain"}],
        previous_response_id=done.id,
        tools=TOOLS,
    )
    assert follow.status == "completed"
    assert upstream.chat_requests()[-1].body["messages"][-1]["tool_call_id"] == "call_9"


def test_stream_helper_accumulates(url: str, upstream: FakeUpstream) -> None:
    with sdk(url).responses.stream(model=MODEL, input="hello there") as stream:
        final = stream.get_final_response()
    assert final.output_text == "echo: hello there"


def test_a_cut_stream_fails_and_cannot_be_continued(url: str, upstream: FakeUpstream):
    upstream.queue(Reply(content="a b c d e f", fail_after_chunks=3))
    events: list[Any] = []
    with pytest.raises(openai.APIError):  # at the `error` event, after `response.failed`
        for event in sdk(url).responses.create(model=MODEL, input="x", stream=True):
            events.append(event)
    kinds = [event.type for event in events]
    assert "response.completed" not in kinds and kinds[-1] == "response.failed"
    with pytest.raises(openai.NotFoundError):
        sdk(url).responses.create(
            model=MODEL, input="more", previous_response_id=events[0].response.id
        )


def test_response_ids_belong_to_their_tenant(upstream: FakeUpstream, start_proxy: Any) -> None:
    keys = [
        {"key": "sk-tenant-a-0123456789abcdef", "tenant": "a"},
        {"key": "sk-tenant-b-0123456789abcdef", "tenant": "b"},
    ]
    url = start_proxy(proxy_config(upstream, auth={"keys": keys}))
    mine = sdk(url, "sk-tenant-a-0123456789abcdef").responses.create(
        model=MODEL, input="secret plan"
    )
    with pytest.raises(openai.NotFoundError) as denied:
        sdk(url, "sk-tenant-b-0123456789abcdef").responses.create(
            model=MODEL, input="tell me", previous_response_id=mine.id
        )
    assert "secret plan" not in str(denied.value.body)
    with pytest.raises(openai.NotFoundError):
        sdk(url, "sk-tenant-a-0123456789abcdef").responses.create(
            model=MODEL, input="x", previous_response_id=mine.id[:-3] + "AAA"
        )
    older = sdk(url, "sk-tenant-a-0123456789abcdef").responses.create(
        model=MODEL, input="go on", previous_response_id=mine.id
    )
    assert older.status == "completed"
    with pytest.raises(openai.ConflictError):  # a branch from a response already continued
        sdk(url, "sk-tenant-a-0123456789abcdef").responses.create(
            model=MODEL, input="again", previous_response_id=mine.id
        )


def encodings(text: str) -> list[str]:
    """Forms a name could be read back from, out of an id (any alignment of base64)."""
    raw = text.encode()
    forms = [text, text.lower(), raw.hex(), quote(text)]
    for shift in range(3):
        padded = base64.urlsafe_b64encode(b"x" * shift + raw).decode().rstrip("=")
        forms.append(padded[4 * ((shift + 2) // 3) + 1 : -2])  # the part no padding touches
    return [form for form in forms if form]


def test_response_ids_say_nothing_of_the_session(url: str, upstream: FakeUpstream) -> None:
    """A response id and its items' ids name their session only to the proxy: a client that
    logs or shows them gives away no part of the session's name."""
    name = "A-private-session-name"
    client = sdk(url, **{"X-Session-Id": name})
    upstream.queue(Reply(content="Let me check.", tool_calls=[weather_call("call_9")]))
    first = client.responses.create(model=MODEL, input="weather in Oslo?", tools=TOOLS)
    ids = [first.id, *(item.id for item in first.output)]
    call = next(item for item in first.output if item.type == "function_call")
    second = sdk(url).responses.create(  # no header: the id alone finds the session
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "cold"}],
        tools=TOOLS,
    )
    ids += [second.id, *(item.id for item in second.output)]
    for id_ in ids:
        for form in encodings(name):
            assert form not in id_, (form, id_)
    headers = {"authorization": "Bearer client-key"}
    stored = httpx.get(f"{url}/v1/sessions/{name}", headers=headers).json()
    assert len(stored["messages"]) == 4  # the call, its output and the reply, in `name`


def test_fifty_turn_chain_on_a_small_model(upstream: FakeUpstream, start_proxy: Any) -> None:
    """50 chained turns through a 4,096-token model: every upstream request within 80%
    of the window (by the test's own count), the latest turn always sent."""
    config = proxy_config(upstream)
    config["model_list"][0]["model_info"] = {"max_input_tokens": 4096, "max_output_tokens": 256}
    url = start_proxy(config)
    client = sdk(url)
    previous = None
    for turn in range(50):
        text = f"turn {turn}: " + " ".join(f"w{turn}x{i}" for i in range(120))
        reply = client.responses.create(
            model=MODEL, input=text, previous_response_id=previous, max_output_tokens=100
        )
        previous = reply.id
        assert reply.output_text == f"echo: {text}"
    for received in upstream.chat_requests():
        assert count_prompt_tokens(received.body) <= 0.8 * 4096
    assert any(
        "Summary of the earlier" in str(r.body["messages"][0])
        for r in upstream.chat_requests()[-5:]
    )


def test_prompt_cache_key_names_the_session(url: str, upstream: FakeUpstream) -> None:
    """Codex sends its conversation id as `prompt_cache_key` and resends every item
    (`store: false`): without a header, that key is the session."""
    client = sdk(url)
    items: list[Any] = [{"role": "user", "content": "first"}]
    first = client.responses.create(
        model=MODEL, input=items, store=False, prompt_cache_key="codex-conv-1"
    )
    items += [
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "next"},
    ]
    client.responses.create(model=MODEL, input=items, store=False, prompt_cache_key="codex-conv-1")
    stored = httpx.get(
        f"{url}/v1/sessions/codex-conv-1", headers={"Authorization": "Bearer client-key"}
    ).json()["messages"]
    assert [m["content"] for m in stored] == ["first", "echo: first", "next", "echo: next"]


def test_a_conversation_id_names_the_session(url: str, upstream: FakeUpstream) -> None:
    """The Responses API's `conversation` (an id, or an object with one) names the
    session: the second turn sends only its new input and the model gets both."""
    client = sdk(url)
    client.responses.create(model=MODEL, input="first", conversation="conv_agent_7")
    reply = client.responses.create(
        model=MODEL, input="second", conversation={"id": "conv_agent_7"}
    )
    assert reply.output_text == "echo: second"
    sent = upstream.chat_requests()[-1].body["messages"]
    assert [m["content"] for m in sent] == ["first", "echo: first", "second"]
    stored = httpx.get(
        f"{url}/v1/sessions/conv_agent_7", headers={"Authorization": "Bearer client-key"}
    ).json()["messages"]
    assert len(stored) == 4
