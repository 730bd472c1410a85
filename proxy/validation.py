"""Request validation: reject what no provider should see, with OpenAI-shaped 400s.

Parameters are checked once per request; messages only where they are new. A full-
resend client's earlier messages were checked when they arrived (and are recognised
byte for byte), so a long conversation is not re-validated on every turn.
"""

from __future__ import annotations

import re
from typing import Any

from proxy.errors import ProxyError
from proxy.upstream import CHAT_PARAMETERS

__all__ = ["ROLES", "invalid", "session_id", "validate_messages", "validate_parameters"]

# Visible ASCII but "/": an id must be usable as one segment of /v1/sessions/{id}.
_SESSION_ID = re.compile(r"[!-.0-~]{1,256}")

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_NUMBERS = ("temperature", "top_p", "presence_penalty", "frequency_penalty")
_INTEGERS = ("n", "max_tokens", "max_completion_tokens", "seed", "top_logprobs")
_TYPED = (
    ("stream", bool, "a boolean"),
    ("tools", list, "an array"),
    ("stream_options", dict, "an object"),
    ("response_format", dict, "an object"),
)


def validate_parameters(body: dict[str, Any]) -> None:
    """Unknown or internal parameters, and parameters of the wrong type (not messages)."""
    for key in body:
        if key not in CHAT_PARAMETERS:
            raise ProxyError(
                400,
                f"Unrecognized request argument supplied: {key}",
                code="unknown_parameter",
                param=key,
            )
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise invalid("model", "`model` is required and must be a non-empty string.")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "`messages` is required and must be a non-empty array.")
    for key in _NUMBERS:
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise invalid(key, f"`{key}` must be a number.")
    for key in _INTEGERS:
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise invalid(key, f"`{key}` must be an integer.")
    for key, kind, name in _TYPED:
        if body.get(key) is not None and not isinstance(body[key], kind):
            raise invalid(key, f"`{key}` must be {name}.")


def validate_messages(messages: list[Any], start: int = 0, offset: int = 0) -> None:
    """messages[start:] are objects with a known role and string-or-array content;
    `offset` is the position of `messages` in the request's own list (for `param`)."""
    for index in range(start, len(messages)):
        message = messages[index]
        if (
            type(message) is not dict
            or message.get("role") not in ROLES
            or type(message.get("content")) not in _CONTENT_TYPES
        ):
            _reject(message, f"messages[{index + offset}]")


_CONTENT_TYPES = frozenset({str, list, type(None)})


def _reject(message: Any, where: str) -> None:
    if not isinstance(message, dict):
        raise invalid(where, f"`{where}` must be an object.")
    if message.get("role") not in ROLES:
        raise invalid(f"{where}.role", f"`{where}.role` must be one of {sorted(ROLES)}.")
    raise invalid(f"{where}.content", f"`{where}.content` must be a string or array.")


def invalid(param: str, message: str) -> ProxyError:
    return ProxyError(400, message, code="invalid_value", param=param)


def session_id(value: str, where: str) -> str:
    """`value` if it is a usable session id, else a 400 naming `where`."""
    if not _SESSION_ID.fullmatch(value):
        raise ProxyError(
            400,
            f"{where}: a session id is 1-256 visible ASCII characters, without `/`.",
            code="invalid_session_id",
            param=where,
        )
    return value
