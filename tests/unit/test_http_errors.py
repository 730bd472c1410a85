"""Domain errors become HTTP in one table (`proxy.http.errors`): every error type has its
status there, and what a client reads (status, OpenAI type, Retry-After, the door's own
error shape) follows from the type alone, or from the provider's own status."""

from __future__ import annotations

import inspect

import orjson
import pytest

from proxy import errors
from proxy.doors.anthropic.response import anthropic_error
from proxy.http.errors import STATUS, error_reply, error_response, status_of

ERROR_TYPES = [
    value
    for value in vars(errors).values()
    if isinstance(value, type) and issubclass(value, errors.ProxyError)
]


@pytest.mark.parametrize("kind", ERROR_TYPES, ids=lambda kind: kind.__name__)
def test_every_error_type_has_its_status_in_the_table_and_takes_none(kind: type) -> None:
    assert kind is errors.ProxyError or kind in STATUS
    assert "status" not in inspect.signature(kind.__init__).parameters


@pytest.mark.parametrize(
    ("error", "status", "openai_type"),
    [
        (errors.InvalidRequest("bad"), 400, "invalid_request_error"),
        (errors.ContextOverflow("too long"), 400, "invalid_request_error"),
        (errors.Unauthenticated("who?"), 401, "authentication_error"),
        (errors.PermissionDenied("no"), 403, "permission_error"),
        (errors.NotFound("gone"), 404, "not_found_error"),
        (errors.RequestTimeout("slow"), 408, "timeout_error"),
        (errors.SessionConflict("moved"), 409, "api_error"),
        (errors.RequestTooLarge("big"), 413, "invalid_request_error"),
        (errors.UnsupportedMediaType("form"), 415, "invalid_request_error"),
        (errors.RateLimited("slow down"), 429, "rate_limit_error"),
        (errors.InternalError("ours"), 500, "api_error"),
        (errors.UpstreamFailure("unreachable"), 502, "upstream_error"),
        (errors.StoreUnavailable("down"), 503, "api_error"),
        (errors.UpstreamTimeout("late"), 504, "upstream_error"),
    ],
)
def test_an_error_is_answered_by_its_type(
    error: errors.ProxyError, status: int, openai_type: str
) -> None:
    reply = error_reply(error)
    assert (reply.status, reply.type, reply.message) == (status, openai_type, error.message)


@pytest.mark.parametrize(
    ("provider", "openai_type"),
    [(400, "invalid_request_error"), (429, "rate_limit_error"), (503, "upstream_error")],
)
def test_a_provider_status_is_passed_on_as_it_came(provider: int, openai_type: str) -> None:
    error = errors.UpstreamFailure("provider says no", provider_status=provider, retry_after="7")
    reply = error_reply(error)
    assert (reply.status, reply.type) == (provider, openai_type)
    assert reply.headers == {"Retry-After": "7"}


def test_waiting_is_said_in_retry_after_beside_the_routes_own_headers() -> None:
    response = error_response(
        "/v1/chat/completions", errors.StoreUnavailable("down"), {"X-Extra": "1"}
    )
    assert response.status_code == 503
    assert (response.headers["retry-after"], response.headers["x-extra"]) == ("1", "1")
    body = orjson.loads(bytes(response.body))
    assert body["error"]["code"] == "store_unavailable"


def test_the_messages_api_answers_in_anthropics_shape() -> None:
    response = error_response("/v1/messages", errors.UpstreamTimeout("late"))
    body = orjson.loads(bytes(response.body))
    assert response.status_code == 504
    assert body == {"type": "error", "error": {"type": "timeout_error", "message": "late"}}
    overloaded = anthropic_error(error_reply(errors.UpstreamFailure("busy", provider_status=529)))
    assert orjson.loads(bytes(overloaded.body))["error"]["type"] == "overloaded_error"


def test_a_redacted_error_keeps_its_type_and_fields() -> None:
    error = errors.SessionConflict("key sk-123 moved", param="previous_response_id")
    scrubbed = error.redacted(lambda text: text.replace("sk-123", "[redacted]"))
    assert type(scrubbed) is errors.SessionConflict and scrubbed is not error
    assert (scrubbed.message, scrubbed.code, scrubbed.param) == (
        "key [redacted] moved",
        "conflict",
        "previous_response_id",
    )
    assert status_of(scrubbed) == 409 and error.message == "key sk-123 moved"
