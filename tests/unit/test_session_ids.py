"""What a session id is: any text a client can send but control characters, up to 256
characters; Claude Code's `metadata.user_id` names its conversation by the `session_id`
inside it; a header's bytes are read as UTF-8."""

from __future__ import annotations

import json

import pytest

from proxy.conversation.validation import header_session_id, session_id
from proxy.doors.base import body_session_id, inner_session_id
from proxy.errors import InvalidRequest

CLAUDE_SESSION = "3f1c2a9e-8b7d-4c6e-9f10-2a3b4c5d6e7f"
DEVICE = "a" * 64
ACCOUNT = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
FIELDS = ["metadata.user_id", "prompt_cache_key", "conversation"]


@pytest.mark.parametrize(
    "value",
    [
        ".",
        "..",
        "-",
        "a/b",
        "has spaces ? # % &",
        "café ☕ 日本語",
        "👩‍💻",  # a zero-width joiner inside
        '{"device_id": "x", "account_uuid": ""}',
        "s" * 256,
        "\u00a0non-breaking\u3000spaces",
    ],
)
def test_any_text_is_a_session_id(value: str) -> None:
    assert session_id(value, "X-Session-Id") == value


@pytest.mark.parametrize(
    "value",
    [
        "",
        "s" * 257,
        "a\nb",
        "a\tb",
        "nul\x00",
        "del\x7f",
        "c1\x85",
        "a\u2028b",
        "a\u2029b",
        "\ud800",
    ],
)
def test_empty_long_or_control_characters_are_refused(value: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        session_id(value, "metadata.user_id")
    assert refused.value.code == "invalid_session_id"
    assert refused.value.param == "metadata.user_id"


def test_a_header_is_read_as_utf8() -> None:
    """Starlette reads a header's bytes as latin-1: the id is the UTF-8 text they spell."""
    sent = "café ☕".encode().decode("latin-1")
    assert header_session_id(sent, "X-Session-Id") == "café ☕"
    assert header_session_id("plain-ascii", "X-Session-Id") == "plain-ascii"
    with pytest.raises(InvalidRequest) as refused:
        header_session_id("caf\xe9", "X-Session-Id")  # latin-1 bytes: not UTF-8
    assert refused.value.code == "invalid_session_id"
    assert "UTF-8" in refused.value.message


def claude_code_user_id(session: str = CLAUDE_SESSION, **more: str) -> str:
    """Claude Code 2.1.78 and later: a JSON object, as a string."""
    return json.dumps({"device_id": DEVICE, "account_uuid": ACCOUNT, "session_id": session, **more})


@pytest.mark.parametrize(
    ("value", "inner"),
    [
        (claude_code_user_id(), CLAUDE_SESSION),
        (claude_code_user_id("odd id ☕"), "odd id ☕"),
        (json.dumps({"session_id": "only"}, separators=(",", ":")), "only"),
        # Before 2.1.78, with an account and without one.
        (f"user_{DEVICE}_account_{ACCOUNT}_session_{CLAUDE_SESSION}", CLAUDE_SESSION),
        (f"user_{DEVICE}_account__session_{CLAUDE_SESSION}", CLAUDE_SESSION),
    ],
)
def test_claude_codes_user_id_names_its_session(value: str, inner: str) -> None:
    assert inner_session_id(value) == inner
    assert body_session_id({"metadata": {"user_id": value}}, FIELDS) == inner


@pytest.mark.parametrize(
    "value",
    [
        "user_ab12_account_cd34_session_ef56",  # no UUID: not Claude Code's
        f"prefix-user_{DEVICE}_account__session_{CLAUDE_SESSION}",
        '{"device_id": "x", "account_uuid": ""}',  # JSON without a session_id
        '{"session_id": ""}',
        '{"session_id": 7}',
        '["session_id"]',
        "{not json",
        "support-ticket-4711",
    ],
)
def test_any_other_value_is_the_id_as_it_is(value: str) -> None:
    assert inner_session_id(value) == value
    assert body_session_id({"metadata": {"user_id": value}}, FIELDS) == value


def test_the_inner_id_is_checked_like_any_other() -> None:
    with pytest.raises(InvalidRequest) as refused:
        body_session_id({"metadata": {"user_id": claude_code_user_id("x" * 300)}}, FIELDS)
    assert refused.value.code == "invalid_session_id"
    assert refused.value.param == "metadata.user_id"
