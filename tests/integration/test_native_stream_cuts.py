"""A provider's own stream that ends without its own end, on both native routes (the
Messages door to an `anthropic/…` deployment, the Responses door to an OpenAI one):
closed cleanly after each kind of event, with what is not JSON, reset, or stalled. The
client gets the door's error event (Anthropic's `event: error`; Responses'
`response.failed` then `error`), the real SDKs raise, and the session is left exactly
as it was. One proxy serves every case; the loopback upstream speaks both APIs."""

from __future__ import annotations

import time
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.integration.test_messages import CLAUDE, claude_config, client
from tests.integration.test_native_responses import NO_REASONING
from tests.integration.test_responses import sdk
from tests.proxies import UPSTREAM_KEY
from tests.upstream import FakeUpstream, Reply
from tests.upstream_messages import kinds, message, message_blocks, message_sequence
from tests.upstream_responses import output, response, response_sequence

TIMEOUT = 1.0  # server.request_timeout_seconds: how long a stalled stream may last
TEXT = "one two three"
ENDS = ["clean", "garbage", "reset", "stall"]

# Each kind of event a stream may stop after, by the door that speaks its API.
MESSAGES_EVENTS = [
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
]
RESPONSES_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]
USAGE = {"input_tokens": 1, "output_tokens": 1}
SEQUENCES = {
    "messages": kinds(message_sequence(message("m", CLAUDE, message_blocks(TEXT, [], []), USAGE))),
    "responses": kinds(response_sequence(response(0, {}, output(0, TEXT, None, []), USAGE))),
}
CASES = [("messages", kind) for kind in MESSAGES_EVENTS]
CASES += [("responses", kind) for kind in RESPONSES_EVENTS]


@pytest.fixture(scope="module")
def module_url_config(_shared_upstream: FakeUpstream) -> dict[str, Any]:
    """One proxy for every case: CLAUDE on the upstream's Messages API, NO_REASONING on
    its Responses API (`native_api`), each stream bounded by TIMEOUT."""
    config = claude_config(_shared_upstream, server={"request_timeout_seconds": TIMEOUT})
    config["model_list"].append(
        {
            "model_name": NO_REASONING,
            "litellm_params": {
                "model": "openai/gpt-4o-mini",
                "api_base": _shared_upstream.base_url,
                "api_key": UPSTREAM_KEY,
            },
            "model_info": {"native_api": True},
        }
    )
    return config


def cut_after(door: str, kind: str, end: str) -> Reply:
    """The upstream's reply: TEXT, its stream stopped (`end`) after the first `kind` event."""
    sent = SEQUENCES[door].index(kind) + 1
    if end == "stall":
        return Reply(content=TEXT, stall_after_chunks=sent, stall_seconds=10)
    return Reply(content=TEXT, fail_after_chunks=sent, stream_end=end)


def stored(url: str, session: str) -> list[dict[str, Any]]:
    headers = {"Authorization": "Bearer client-key"}
    return httpx.get(f"{url}/v1/sessions/{session}", headers=headers).json()["messages"]


@pytest.fixture(scope="module")
def sessions(module_url: str) -> dict[str, list[dict[str, Any]]]:
    """For each door, a session of one finished turn (streamed through the SDK) that
    every cut turn continues, and that each must leave exactly as it is."""
    out = {}
    for door in ("messages", "responses"):
        ask("hello", door, module_url, f"cut-{door}", [])
        out[door] = stored(module_url, f"cut-{door}")
        assert [m["role"] for m in out[door]] == ["user", "assistant"]
    return out


def ask(text: str, door: str, url: str, session: str, seen: list[Any]) -> None:
    """`text` as a streamed turn through the door's SDK, each event it yields put in
    `seen` (the SDK raises what it raises)."""
    if door == "messages":
        messages = [{"role": "user", "content": text}]
        with client(url, session).messages.stream(
            model=CLAUDE, max_tokens=50, messages=messages
        ) as stream:
            seen.extend(stream)
            stream.get_final_message()
        return
    headers = {"X-Session-Id": session}
    for event in sdk(url, **headers).responses.create(model=NO_REASONING, input=text, stream=True):
        seen.append(event)


FINISHED = {"messages": "message_stop", "responses": "response.completed"}
RAISED = {"messages": anthropic.APIStatusError, "responses": openai.APIError}


@pytest.mark.parametrize("door", ["messages", "responses"])
def test_a_whole_stream_is_stored(module_url: str, upstream: FakeUpstream, door: str) -> None:
    """The control: the same turn, not cut, ends with the API's own end and is stored."""
    session = f"whole-{door}"
    upstream.queue(Reply(content=TEXT))
    seen: list[Any] = []
    ask("more", door, module_url, session, seen)
    assert seen[-1].type == FINISHED[door]
    assert [m["content"] for m in stored(module_url, session)] == ["more", TEXT]


@pytest.mark.parametrize("end", ENDS)
@pytest.mark.parametrize(("door", "kind"), CASES)
def test_a_cut_native_stream_is_the_apis_error_and_stores_nothing(
    module_url: str,
    sessions: dict[str, list[dict[str, Any]]],
    upstream: FakeUpstream,
    door: str,
    kind: str,
    end: str,
) -> None:
    session = f"cut-{door}"
    upstream.queue(cut_after(door, kind, end))
    seen: list[Any] = []
    began = time.monotonic()
    with pytest.raises(RAISED[door]) as raised:
        ask("more", door, module_url, session, seen)
    took = time.monotonic() - began
    kinds = [event.type for event in seen]
    assert FINISHED[door] not in kinds
    if door == "responses":  # the response's own end, then the `error` the SDK raises at
        assert kinds[-1] == "response.failed", kinds
        numbers = [event.sequence_number for event in seen]
        assert numbers == sorted(set(numbers)), numbers  # the proxy's own follow on
    if end == "clean":
        assert "ended before the reply was finished" in str(raised.value)
    if end == "stall":
        assert TIMEOUT <= took < TIMEOUT + 3, took  # bounded by the configured deadline
    assert stored(module_url, session) == sessions[door]  # exactly as it was
    if door == "responses":
        assert raised.value.body is not None  # the `error` event's own error object
