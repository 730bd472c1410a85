"""Responses `item_reference`: a client (the Vercel AI SDK, by default) sends earlier
output back as references to the output items the proxy returned; each is resolved from
the session's stored reply, on the chat translation and in the Responses API, streamed
or not. An id that names nothing stored is a 400 that names it."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from proxy.doors.base import text_of
from tests.integration.test_native_responses import REASONING, native_config
from tests.integration.test_responses import TOOLS, sdk, weather_call
from tests.proxies import MODEL, proxy_config
from tests.upstream import FakeUpstream, Reply

KEY = "client-key-0123456789abcdef"

NATIVE = "gpt-native"  # a reasoning model in the Responses API (test_native_responses)


@pytest.fixture
def url_config(upstream: FakeUpstream) -> dict[str, Any]:
    return native_config(upstream)


def create(client: openai.OpenAI, stream: bool, **body: Any) -> Any:
    """A response, whole or streamed (then the one `response.completed` carries)."""
    if not stream:
        return client.responses.create(**body)
    events = list(client.responses.create(stream=True, **body))
    assert events[-1].type == "response.completed", events[-1]
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [item.id for item in done] == [item.id for item in events[-1].response.output]
    return events[-1].response


def reference(item: Any) -> dict[str, str]:
    return {"type": "item_reference", "id": item.id}


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def stored(url: str, session: str) -> list[dict[str, Any]]:
    auth = {"Authorization": f"Bearer {KEY}"}
    return httpx.get(f"{url}/v1/sessions/{session}", headers=auth).json()["messages"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_references_to_text_and_calls_on_the_chat_translation(
    stream: bool, url: str, upstream: FakeUpstream
) -> None:
    """The AI SDK's second request, with no session header: its earlier output as
    references, which name the session and resolve to what the model said, so the turn
    continues that one session."""
    upstream.queue(Reply(content="Let me check.", tool_calls=[weather_call("call_7")]))
    upstream.queue(Reply(content="It is cold."))
    client = sdk(url, KEY)
    first = create(client, stream, model=MODEL, input=[user("Weather in Oslo?")], tools=TOOLS)
    text, call = first.output
    assert (text.type, call.type) == ("message", "function_call")
    assert len({first.id, text.id, call.id}) == 3
    output = {"type": "function_call_output", "call_id": "call_7", "output": "-5 C"}
    history = [user("Weather in Oslo?"), reference(text), reference(call), output]
    second = create(client, stream, model=MODEL, input=history, tools=TOOLS)
    assert second.output[0].content[0].text == "It is cold."
    sent = upstream.chat_requests()[-1].body["messages"]
    assert text_of(sent[1]["content"]) == "Let me check."
    assert sent[1]["tool_calls"] == [weather_call("call_7")]
    assert sent[2] == {"role": "tool", "tool_call_id": "call_7", "content": "-5 C"}
    third = create(
        client,
        stream,
        model=MODEL,
        input=[*history, reference(second.output[0]), user("Thanks.")],
        tools=TOOLS,
    )
    assert third.output[0].content[0].text == "echo: Thanks."
    [session] = [s["id"] for s in _sessions(url)]
    roles = [m["role"] for m in stored(url, session)]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_references_in_the_responses_api_send_the_providers_own_items(
    stream: bool, url: str, upstream: FakeUpstream
) -> None:
    """To a deployment that speaks the Responses API: the client sees ids of the proxy's
    (which name their place), and a reference brings back the provider's own item, with
    its id and encrypted reasoning, as the provider sent it."""
    upstream.queue(Reply(content="Hello Ada.", blocks=[REASONING]))
    client = sdk(url, KEY, **{"X-Session-Id": f"native-{stream}"})
    first = create(client, stream, model=NATIVE, input=[user("I am Ada")])
    reasoning, message = first.output
    assert reasoning.id != REASONING["id"] and reasoning.encrypted_content
    assert message.id != "msg_test_0" and message.content[0].text == "Hello Ada."
    history = [user("I am Ada"), reference(reasoning), reference(message), user("Who am I?")]
    second = create(client, stream, model=NATIVE, input=history)
    assert second.output[0].content[0].text == "echo: Who am I?"
    sent = upstream.responses_requests()[-1].body["input"]
    assert sent[1] == REASONING  # as the provider sent it: its own id
    assert sent[2]["id"].startswith("msg_test_") and sent[2]["content"][0]["text"] == "Hello Ada."
    assert [m["role"] for m in stored(url, f"native-{stream}")] == ["user", "assistant"] * 2


def test_items_echoed_whole_go_back_under_the_providers_ids(
    url: str, upstream: FakeUpstream
) -> None:
    """A client that sends its earlier output whole (`store: false`) echoes the proxy's
    ids: the provider gets its items under the ids it gave them."""
    upstream.queue(Reply(content="Hello Ada.", blocks=[REASONING]))
    client = sdk(url, KEY, **{"X-Session-Id": "whole"})
    first = client.responses.create(model=NATIVE, input=[user("I am Ada")], store=False)
    echoed = [item.model_dump(exclude_none=True) for item in first.output]
    assert echoed[0]["id"].endswith("~" + REASONING["id"])
    history = [user("I am Ada"), *echoed, user("Who am I?")]
    client.responses.create(model=NATIVE, input=history, store=False)
    sent = upstream.responses_requests()[-1].body["input"]
    assert sent[1]["id"] == REASONING["id"] and sent[1]["encrypted_content"]
    assert sent[2]["id"].startswith("msg_test_")


def test_a_response_of_another_session_is_read_from_its_own(
    url: str, upstream: FakeUpstream
) -> None:
    """A reference names its session; a request with a session header of its own takes
    the item from where the id says, and stays in its own session."""
    client = sdk(url, KEY)
    first = client.responses.create(model=MODEL, input="I am Ada")
    moved = sdk(url, KEY, **{"X-Session-Id": "elsewhere"})
    history = [user("I am Ada"), reference(first.output[0]), user("Who am I?")]
    moved.responses.create(model=MODEL, input=history)
    assert stored(url, "elsewhere")[1]["content"] == [{"type": "text", "text": "echo: I am Ada"}]
    assert len(_sessions(url)) == 2


def _sessions(url: str) -> list[dict[str, Any]]:
    auth = {"Authorization": f"Bearer {KEY}"}
    return httpx.get(f"{url}/v1/sessions", headers=auth).json()["data"]


def test_unknown_references_are_a_400_naming_the_id(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """Not an id of the proxy's, another key's, one whose session was deleted, one of a
    response that was never stored, a call its response never made: each a 400 that
    names the id and `input`; the upstream is never called."""
    keys = {"keys": [{"key": KEY}, {"key": "other-key-0123456789abcdef"}]}
    url = start_proxy(proxy_config(upstream, auth=keys))
    client = sdk(url, KEY)
    kept = client.responses.create(model=MODEL, input="I am Ada")
    unstored = client.responses.create(model=MODEL, input="Hi", store=False)
    gone = sdk(url, KEY, **{"X-Session-Id": "gone"}).responses.create(model=MODEL, input="Bye")
    auth = {"Authorization": f"Bearer {KEY}"}
    assert httpx.delete(f"{url}/v1/sessions/gone", headers=auth).status_code == 200
    cases = [
        (client, "msg_0123"),
        (sdk(url, key="other-key-0123456789abcdef"), kept.output[0].id),
        (client, gone.output[0].id),
        (client, unstored.output[0].id),
        (client, kept.output[0].id.replace("msg_", "fc_")),
    ]
    calls = len(upstream.chat_requests())
    for caller, item_id in cases:
        with pytest.raises(openai.BadRequestError) as raised:
            caller.responses.create(
                model=MODEL, input=[user("I am Ada"), {"type": "item_reference", "id": item_id}]
            )
        error = raised.value.body
        assert error["type"] == "invalid_request_error" and error["param"] == "input", error
        assert item_id in error["message"], error
    no_id = {"type": "item_reference"}
    response = httpx.post(
        f"{url}/v1/responses", json={"model": MODEL, "input": [no_id]}, headers=auth
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == "input[0].id"
    assert len(upstream.chat_requests()) == calls


def test_a_reply_that_took_another_ones_place_has_ids_of_its_own(
    url: str, upstream: FakeUpstream
) -> None:
    """After an edit of history, a reply at the same place as an earlier one (the same
    transcript length) has other ids: a reference to the one it replaced is a 400, never
    the new reply's text."""
    client = sdk(url, KEY, **{"X-Session-Id": "edited"})
    first = client.responses.create(model=MODEL, input=[user("one")])
    before = [user("one"), reference(first.output[0])]
    replaced = client.responses.create(model=MODEL, input=[*before, user("two")])
    edited = client.responses.create(model=MODEL, input=[*before, user("deux")])
    assert edited.output_text == "echo: deux"
    assert edited.output[0].id != replaced.output[0].id
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(
            model=MODEL, input=[*before, user("deux"), reference(replaced.output[0])]
        )
    assert replaced.output[0].id in raised.value.body["message"]
    texts = [text_of(m["content"]) for m in stored(url, "edited")]
    assert texts == ["one", "echo: one", "deux", "echo: deux"]
