"""The doors' own APIs (`proxy.upstream.native`): a window rendered back into a door's shape is
what the client sent, and the routes go only where a deployment speaks the API."""

from __future__ import annotations

import sys
from typing import Any

import orjson
import pytest

from proxy.config.settings import Settings
from proxy.doors.anthropic import request as messages
from proxy.doors.anthropic.native import MessagesNative
from proxy.doors.anthropic.render import SYSTEM_NOTE
from proxy.doors.responses import request as responses
from proxy.doors.responses.native import ResponsesNative
from proxy.upstream import native
from proxy.upstream.router import native_models


def sent_of(request: dict[str, Any]) -> dict[str, Any]:
    """A native request as the provider reads it (its window is JSON already)."""
    parsed: dict[str, Any] = orjson.loads(orjson.dumps(request))
    return parsed


SIGNED = {"type": "thinking", "thinking": "Check the file.", "signature": "c2lnbmVk"}
EPHEMERAL = {"type": "ephemeral"}

MESSAGES_BODIES: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "hello"}]},
    {
        "system": [{"type": "text", "text": "Rules.", "cache_control": EPHEMERAL}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a", "cache_control": EPHEMERAL}],
            },
            {
                "role": "assistant",
                "content": [
                    SIGNED,
                    {"type": "redacted_thinking", "data": "b3BhcXVl"},
                    {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": "a"}},
                    {"type": "tool_use", "id": "t2", "name": "Read", "input": {"p": "b"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "x", "is_error": True},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "content": [{"type": "text", "text": "y"}],
                        "cache_control": EPHEMERAL,
                    },
                    {"type": "text", "text": "So?"},
                ],
            },
            {"role": "system", "content": "On branch main."},
            {
                "role": "assistant",
                "content": [
                    {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}},
                    {"type": "web_search_tool_result", "tool_use_id": "s1", "content": []},
                    {"type": "text", "text": "Found.", "citations": [{"url": "u"}]},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
                    },
                    {
                        "type": "document",
                        "source": {"type": "url", "url": "https://example.org/a.pdf"},
                    },
                ],
            },
        ],
    },
]


@pytest.mark.parametrize("body", MESSAGES_BODIES)
def test_a_messages_window_goes_back_as_it_came(body: dict[str, Any]) -> None:
    body = {"model": "claude", "max_tokens": 10, **body}
    chat, _ = messages.to_chat(body)
    sent = sent_of(MessagesNative(body).request(chat, summarized=False, mid_system=True))
    assert sent["messages"] == body["messages"]
    assert sent.get("system") == (body.get("system") or None)


def test_a_summary_takes_a_breakpoint_only_where_one_is_left() -> None:
    body: dict[str, Any] = {
        "model": "claude",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "q"}],
    }
    summary = {"role": "system", "content": "Summary of the earlier conversation: …"}
    chat = {"model": "claude", "max_tokens": 10, "messages": [summary, *body["messages"]]}
    sent = sent_of(MessagesNative(body).request(chat, summarized=True, mid_system=False))
    assert sent["system"] == [
        {"type": "text", "text": summary["content"], "cache_control": EPHEMERAL}
    ]
    crowded = [{"type": "text", "text": f"r{n}", "cache_control": EPHEMERAL} for n in range(4)]
    chat["messages"] = [{"role": "system", "content": crowded}, summary, *body["messages"]]
    sent = sent_of(MessagesNative(body).request(chat, summarized=True, mid_system=False))
    assert "cache_control" not in sent["system"][-1]


def _claude(messages: list[dict[str, Any]], mid_system: bool) -> list[dict[str, Any]]:
    body: dict[str, Any] = {"model": "claude", "max_tokens": 10, "messages": []}
    chat = {"model": "claude", "max_tokens": 10, "messages": messages}
    return sent_of(MessagesNative(body).request(chat, summarized=False, mid_system=mid_system))[
        "messages"
    ]


RECALLED = {"role": "system", "content": "Recalled from earlier in this conversation: …"}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}],
}
RESULT = {"role": "tool", "tool_call_id": "t1", "content": "a.py"}


def test_a_system_message_mid_conversation_is_a_user_turn_where_claude_refuses_the_role() -> None:
    """Before Claude 4.8 Anthropic refuses `system` in `messages`: the recall block goes
    as a labelled user turn in its place, the turns before it as they were."""
    before = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    asked = {"role": "user", "content": "and the logs?"}
    plain = _claude([*before, asked], mid_system=False)
    sent = _claude([*before, RECALLED, asked], mid_system=False)
    assert sent[:2] == plain[:2] and sent[3] == plain[2]
    assert sent[2] == {
        "role": "user",
        "content": [
            {"type": "text", "text": SYSTEM_NOTE},
            {"type": "text", "text": RECALLED["content"]},
        ],
    }
    # A model that takes the role there gets it where it stood.
    kept = _claude([*before, RECALLED, asked], mid_system=True)
    assert kept[2] == {"role": "system", "content": RECALLED["content"]}


def test_a_system_message_between_a_tool_call_and_its_results_goes_after_them() -> None:
    """A user turn between a tool call and its results would part them (Anthropic
    refuses that): it follows the results instead."""
    sent = _claude(
        [
            {"role": "user", "content": "list"},
            CALL,
            RECALLED,
            RESULT,
            {"role": "user", "content": "ok"},
        ],
        mid_system=False,
    )
    assert [turn["role"] for turn in sent] == ["user", "assistant", "user", "user", "user"]
    assert sent[2]["content"][0]["type"] == "tool_result"
    assert sent[3]["content"][1]["text"] == RECALLED["content"]
    assert sent[4]["content"] == "ok"


REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "Z0FB"}
RESPONSES_INPUT: list[dict[str, Any]] = [
    {"type": "message", "role": "developer", "content": "Be careful."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List."}]},
    REASONING,
    {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
    {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
    },
    {"type": "message", "role": "user", "content": "Thanks."},
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Bye.", "annotations": []}],
    },
]


def test_a_responses_window_goes_back_as_it_came() -> None:
    body = {"model": "gpt", "instructions": "You are Codex.", "input": RESPONSES_INPUT}
    chat, _ = responses.to_chat(body)
    sent = sent_of(ResponsesNative(body).request(chat, summarized=False, mid_system=False))
    assert sent["instructions"] == "You are Codex."
    assert sent["input"] == RESPONSES_INPUT


def test_a_responses_reply_keeps_what_chat_cannot_hold() -> None:
    reply = {
        "id": "resp_1",
        "status": "completed",
        "output": [
            REASONING,
            {"type": "function_call", "call_id": "c9", "name": "ls", "arguments": "{}"},
        ],
        "usage": {
            "input_tokens": 7,
            "input_tokens_details": {"cached_tokens": 4},
            "output_tokens": 3,
        },
    }
    completion = ResponsesNative({"model": "gpt"}).completion(reply)
    message = completion["choices"][0]["message"]
    assert message["tool_calls"][0]["id"] == "c9"
    assert message["responses_output"] == reply["output"]
    assert completion["choices"][0]["finish_reason"] == "tool_calls"
    # The usage in chat terms, the cached share kept (it is priced apart).
    assert completion["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "total_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 4},
        "cache_read_input_tokens": 4,
        "cache_creation_input_tokens": 0,
    }


def test_native_routes_go_only_where_the_api_is_spoken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)

    def entry(name: str, model: str, base: str | None = None, **info: Any) -> dict[str, Any]:
        params = {"model": model} | ({"api_base": base} if base else {})
        return {"model_name": name, "litellm_params": params, "model_info": info}

    settings = Settings.model_validate(
        {
            "model_list": [
                entry("claude", "anthropic/claude-sonnet-4-5", "http://127.0.0.1:9"),
                entry("claude-chat", "anthropic/claude-sonnet-4-5", native_api=False),
                entry("gpt", "openai/gpt-4o"),
                entry("compatible", "openai/llama", "http://127.0.0.1:9/v1"),
                entry("declared", "openai/llama", "http://127.0.0.1:9/v1", native_api=True),
                entry("mixed", "openai/gpt-4o"),
                entry("mixed", "anthropic/claude-sonnet-4-5"),
            ]
        }
    )
    routes = native_models(settings)
    assert routes["anthropic_messages"] == {"claude"}
    assert routes["responses"] == {"gpt", "declared"}

    # An `openai/…` deployment without `api_base` goes where the environment says.
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert native_models(settings)["responses"] == {"declared"}


def test_a_responses_stream_finishes_only_on_its_completion() -> None:
    """Text deltas as content; the finish (and the whole turn, where chat lacks it) only
    when the response says it is complete."""
    events = ResponsesNative({"model": "gpt"}).stream()
    _, chunks = events.event("response.output_text.delta", {"delta": "Hi"}, b"")
    assert chunks[0]["choices"][0]["delta"] == {"content": "Hi"}
    for output, fields in (
        ([], {}),
        ([REASONING], {"message_fields": {"responses_output": [REASONING]}}),
    ):
        done = {"response": {"status": "completed", "output": output, "usage": {}}}
        _, chunks = (
            ResponsesNative({"model": "gpt"}).stream().event("response.completed", done, b"")
        )
        assert chunks[-1]["choices"][0] == {"index": 0, "delta": fields, "finish_reason": "stop"}


def test_a_turn_with_citations_is_kept_whole() -> None:
    """Annotations (a web search's citations) are more than the chat form's text holds."""
    cited = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Tides.", "annotations": [{"url": "u"}]}],
    }
    body = {"model": "gpt", "input": [{"type": "message", "role": "user", "content": "q"}, cited]}
    chat, _ = responses.to_chat(body)
    assert chat["messages"][1]["responses_output"] == [cited]
    assert (
        sent_of(ResponsesNative(body).request(chat, summarized=False, mid_system=False))["input"]
        == body["input"]
    )


def test_the_kept_calls_hold_at_most_their_bytes_and_the_latest_call() -> None:
    """`_call`'s results are kept by the bytes they hold: hostile parameters of a few
    MB each leave at most `KEPT_CALL_BYTES`, and the latest call is still answered from
    what was kept."""
    made = []
    for n in range(12):
        instructions = f"{n} " + "x" * (3 << 20)
        request = orjson.dumps({"instructions": instructions})
        made.append(native._call("responses", "gpt-4.1", request, "sk-1", None, False))
        assert native._calls.held <= native.KEPT_CALL_BYTES
    assert native._calls.held > native.KEPT_CALL_BYTES // 2
    again = native._call("responses", "gpt-4.1", request, "sk-1", None, False)
    assert again is made[-1]
    assert orjson.loads(again[2])["instructions"] == instructions


def test_the_kept_calls_are_at_most_so_many() -> None:
    """A burst of distinct small parameters (each call's key, headers and URL weigh more
    than the bytes counted) leaves at most `KEPT_CALLS` of them kept."""
    for n in range(2 * native.KEPT_CALLS):
        request = orjson.dumps({"instructions": f"be brief, {n}"})
        native._call("responses", "gpt-4.1", request, "sk-1", None, False)
    assert len(native._calls._known) == native.KEPT_CALLS


def test_the_kept_calls_hold_no_more_than_their_bytes() -> None:
    """What is kept is bytes of their own size: orjson's output keeps its buffer (4 KiB
    for a few bytes, up to twice a long one), which 256 kept calls of the fuzz's turned
    into 74 MB where 8 MB was counted."""
    request = orjson.dumps({"instructions": "be brief", "tools": [{"type": "x" * 50_000}]})
    native._call("responses", "gpt-4.1", request, "sk-1", None, False)
    (kept, made), *_ = reversed(native._calls._known.items())
    for data in (kept[2], made[2]):
        assert sys.getsizeof(data) - len(data) < 64
