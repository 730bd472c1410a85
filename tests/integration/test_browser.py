"""A web page the user visits cannot make the proxy spend their provider key: bodies are
read only as JSON (which a page cannot send without a preflight), and requests from
another web origin are refused unless `server.cors_origins` lists it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import MODEL, proxy_config
from tests.upstream import FakeUpstream, Reply

BODY = b'{"model": "%s", "messages": [{"role": "user", "content": "spend it"}]}' % MODEL.encode()
# Another web origin, as a browser would name it (loopback, never contacted).
ELSEWHERE = "http://127.0.0.1:9"


def chat(proxy_url: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(proxy_url + "/v1/chat/completions", content=BODY, headers=headers)


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain;charset=UTF-8",  # a page's fetch() of a string, or a form's text/plain
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        None,  # a fetch() of a Blob without a type
    ],
)
def test_a_body_a_page_can_send_without_asking_is_refused(
    proxy_url: str, upstream: FakeUpstream, content_type: str | None
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    response = chat(proxy_url, headers)
    assert response.status_code == 415, response.text
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert upstream.chat_requests() == []


def test_another_origin_is_refused_before_the_provider_is_paid(
    proxy_url: str, upstream: FakeUpstream
) -> None:
    headers = {"content-type": "application/json", "origin": ELSEWHERE}
    response = chat(proxy_url, headers)
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "origin_not_allowed"
    preflight = httpx.options(
        proxy_url + "/v1/chat/completions",
        headers={"origin": ELSEWHERE, "access-control-request-method": "POST"},
    )
    assert "access-control-allow-origin" not in preflight.headers
    assert upstream.chat_requests() == []


def test_json_from_the_proxys_own_origin_or_no_browser_is_served(
    proxy_url: str, upstream: FakeUpstream
) -> None:
    upstream.queue(Reply(content="one"), Reply(content="two"))
    assert chat(proxy_url, {"content-type": "application/json; charset=utf-8"}).status_code == 200
    own = {"content-type": "application/json", "origin": proxy_url}
    assert chat(proxy_url, own).status_code == 200
    assert len(upstream.chat_requests()) == 2


def test_listed_origins_get_cors_and_others_still_do_not(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    allowed = "http://127.0.0.1:8080"
    proxy_url = start_proxy(proxy_config(upstream, server={"cors_origins": [allowed]}))
    preflight = httpx.options(
        proxy_url + "/v1/chat/completions",
        headers={
            "origin": allowed,
            "access-control-request-method": "POST",
            "access-control-request-headers": "content-type, authorization, x-session-id",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == allowed
    upstream.queue(Reply(content="hello page"))
    response = chat(proxy_url, {"content-type": "application/json", "origin": allowed})
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == allowed
    other = chat(proxy_url, {"content-type": "application/json", "origin": ELSEWHERE})
    assert other.status_code == 403
    assert len(upstream.chat_requests()) == 1
