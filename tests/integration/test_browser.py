"""A web page the user visits cannot make the proxy spend their provider key: bodies are
read only as JSON (which a page cannot send without a preflight), requests from
another web origin are refused unless `server.cors_origins` lists it, and a keyless
proxy answers loopback host names only (a rebound DNS name reaches nothing). Nor the session
viewer's login: a page on another port of the same host (another origin, the same
site), in a real Chromium, can neither read the login cookie nor spend it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

import httpx
import pytest
from playwright.sync_api import Browser, Response, expect

from proxy.http.browser import PAGE_HEADER
from tests.integration.test_auth import KEY_A, KEYS
from tests.integration.test_viewer import (
    Login,
    browser,
    cookie,
    keyed,
    log_in,
    logged_in,
    login_of,
    sessions_with,
)
from tests.proxies import MODEL, proxy_config
from tests.upstream import FakeUpstream, Reply

__all__ = ["browser", "keyed"]  # the fixtures this module borrows from test_viewer.py

BODY = b'{"model": "%s", "messages": [{"role": "user", "content": "spend it"}]}' % MODEL.encode()
# Another web origin, as a browser would name it (loopback, never contacted).
ELSEWHERE = "http://127.0.0.1:9"


def chat(url: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", content=BODY, headers=headers)


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
    url: str, upstream: FakeUpstream, content_type: str | None
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    response = chat(url, headers)
    assert response.status_code == 415, response.text
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert upstream.chat_requests() == []


def test_another_origin_is_refused_before_the_provider_is_paid(
    url: str, upstream: FakeUpstream
) -> None:
    headers = {"content-type": "application/json", "origin": ELSEWHERE}
    response = chat(url, headers)
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "origin_not_allowed"
    preflight = httpx.options(
        url + "/v1/chat/completions",
        headers={"origin": ELSEWHERE, "access-control-request-method": "POST"},
    )
    assert "access-control-allow-origin" not in preflight.headers
    assert upstream.chat_requests() == []


def test_json_from_the_proxys_own_origin_or_no_browser_is_served(
    url: str, upstream: FakeUpstream
) -> None:
    upstream.queue(Reply(content="one"), Reply(content="two"))
    assert chat(url, {"content-type": "application/json; charset=utf-8"}).status_code == 200
    own = {"content-type": "application/json", "origin": url}
    assert chat(url, own).status_code == 200
    assert len(upstream.chat_requests()) == 2


REBOUND = "rebind.attacker.example"


def test_a_name_rebound_to_loopback_cannot_reach_the_keyless_proxy(
    url: str, upstream: FakeUpstream
) -> None:
    """DNS rebinding: a page on the attacker's name, once that name resolves to 127.0.0.1,
    is the same origin as the proxy by every measure but its `Host`. Without keys, the
    proxy answers loopback names only: the page reads no session and spends no key."""
    port = url.rsplit(":", 1)[1]
    upstream.queue(Reply(content="the secret plan"))
    seeded = {"content-type": "application/json", "x-session-id": "private-notes"}
    assert chat(url, seeded).status_code == 200
    rebound = {"host": f"{REBOUND}:{port}", "origin": f"http://{REBOUND}:{port}"}
    attempts = [
        httpx.get(url + "/v1/sessions", headers=rebound),
        httpx.get(url + "/v1/sessions/private-notes", headers=rebound),
        chat(url, rebound | {"content-type": "application/json"}),
        httpx.get(url + "/v1/sessions", headers={"host": REBOUND}),  # no Origin, no port
    ]
    for answer in attempts:
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["code"] == "host_not_allowed"
        assert "the secret plan" not in answer.text and "private-notes" not in answer.text
    assert len(upstream.chat_requests()) == 1  # the seeding turn alone
    for name in ("localhost", "127.0.0.1", "[::1]", "LocalHost"):
        for host in (name, f"{name}:{port}"):
            own = {"host": host, "origin": f"http://{host}"}
            assert httpx.get(url + "/v1/sessions", headers=own).status_code == 200, host


def test_allowed_hosts_names_more_and_keys_answer_any_name(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    listed = start_proxy(proxy_config(upstream, server={"allowed_hosts": ["proxy.internal"]}))
    assert httpx.get(listed + "/v1/sessions", headers={"host": "proxy.internal"}).is_success
    refused = httpx.get(listed + "/v1/sessions", headers={"host": REBOUND})
    assert refused.json()["error"]["code"] == "host_not_allowed"
    keyed_url = start_proxy(proxy_config(upstream, auth=KEYS))
    with_key = {"host": "proxy.example.com", "authorization": f"Bearer {KEY_A}"}
    assert httpx.get(keyed_url + "/v1/sessions", headers=with_key).status_code == 200
    without = httpx.get(keyed_url + "/v1/sessions", headers={"host": REBOUND})
    assert without.status_code == 401  # a rebound page has no key to send


def test_listed_origins_get_cors_and_others_still_do_not(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    allowed = "http://127.0.0.1:8080"
    url = start_proxy(proxy_config(upstream, server={"cors_origins": [allowed]}))
    preflight = httpx.options(
        url + "/v1/chat/completions",
        headers={
            "origin": allowed,
            "access-control-request-method": "POST",
            "access-control-request-headers": "content-type, authorization, x-session-id",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == allowed
    upstream.queue(Reply(content="hello page"))
    response = chat(url, {"content-type": "application/json", "origin": allowed})
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == allowed
    other = chat(url, {"content-type": "application/json", "origin": ELSEWHERE})
    assert other.status_code == 403
    assert len(upstream.chat_requests()) == 1


def test_a_listed_origin_cannot_spend_the_viewer_login(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    """`cors_origins: ["*"]` lets any page call the API with a key; the viewer's login
    cookie is still spent for the proxy's own page only."""
    url = start_proxy(proxy_config(upstream, auth=KEYS, server={"cors_origins": ["*"]}))
    login = login_of(log_in(url, KEY_A), url)
    assert sessions_with(url, login).status_code == 200
    answer = sessions_with(url, login, Origin=ELSEWHERE, **{"Sec-Fetch-Site": "same-site"})
    assert answer.status_code == 401
    assert "access-control-allow-credentials" not in answer.headers
    assert sessions_with(url, login, Origin=ELSEWHERE).status_code == 401  # no Sec-Fetch-Site
    preflight = httpx.options(
        url + "/ui/api/sessions",
        headers={
            "origin": ELSEWHERE,
            "access-control-request-method": "GET",
            "access-control-request-headers": PAGE_HEADER,
        },
    )
    assert "access-control-allow-credentials" not in preflight.headers


class Elsewhere(NamedTuple):
    url: str
    cookies: list[str]  # every Cookie header the browser sent it


@pytest.fixture
def elsewhere() -> Iterator[Elsewhere]:
    """Another port of 127.0.0.1: another origin, but the same site as the proxy's. It
    serves a blank page on every path (`/ui/` too, where the cookie's path would show),
    and keeps the cookies the browser sends it."""
    cookies: list[str] = []

    class Blank(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            cookies.append(self.headers.get("Cookie", ""))
            body = b"<!doctype html><title>elsewhere</title><p>another port"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Blank)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Elsewhere(f"http://127.0.0.1:{server.server_port}", cookies)
    finally:
        server.shutdown()
        server.server_close()


# Every way a page can ask the browser to call the viewer with its cookies.
ATTEMPTS = """async ([proxy, header]) => {
  const api = `${proxy}/ui/api/sessions`;
  const page = { [header]: "1" };
  const logout = `${proxy}/ui/logout`;
  const tries = {
    read: [api, { credentials: "include" }],
    read_as_the_page: [api, { credentials: "include", headers: page }],
    read_blind: [api, { credentials: "include", mode: "no-cors" }],
    one: [`${api}/a-notes`, { credentials: "include", mode: "no-cors" }],
    remove: [`${api}/a-notes`, { credentials: "include", method: "DELETE", headers: page }],
    remove_blind: [`${api}/a-notes`, { credentials: "include", method: "DELETE" }],
    log_out: [logout, { credentials: "include", method: "POST", mode: "no-cors" }],
    log_out_as_the_page: [logout, { credentials: "include", method: "POST", headers: page }],
  };
  const out = {};
  for (const [name, [url, options]] of Object.entries(tries)) {
    try {
      const response = await fetch(url, options);
      out[name] = { status: response.status, type: response.type, body: await response.text() };
    } catch (error) {
      out[name] = { error: String(error) };
    }
  }
  return out;
}"""


def test_a_page_on_another_port_cannot_read_or_spend_the_viewer_login(
    keyed: str, browser: Browser, elsewhere: Elsewhere
) -> None:
    """Logged in on the proxy's origin, the browser opens a page on another port of
    127.0.0.1: its script reads no cookie, its calls to the viewer get nothing (refused
    by the browser, or opaque and refused by the proxy); its server is sent the cookie
    (cookies ignore ports), which without the page token opens nothing either."""
    page = logged_in(browser, keyed, KEY_A)  # on the proxy's own origin, through the form
    [held] = page.context.cookies()
    assert held["name"] == cookie(keyed)
    login = Login(held["value"], page.evaluate("localStorage['context-proxy-page-token']"))
    reached: list[Response] = []  # what the proxy answered the other page
    other = page.context.new_page()  # the same browser profile: the same cookie jar
    other.on("response", lambda r: reached.append(r) if r.url.startswith(keyed) else None)
    other.goto(elsewhere.url + "/ui/")
    assert other.evaluate("document.cookie") == ""  # HttpOnly: not even its name
    assert other.evaluate("localStorage.length") == 0  # the page token is the proxy origin's
    results = other.evaluate(ATTEMPTS, [keyed, PAGE_HEADER])
    shown = json.dumps(results)
    assert KEY_A not in shown and login.token not in shown and login.page not in shown
    assert "a-notes" not in shown
    for name, result in results.items():
        # CORS refused (no data) or opaque (no status, no body): nothing reaches the page.
        assert "error" in result or (result["type"], result["body"]) == ("opaque", ""), name
    # The proxy refused whatever reached it; nothing was deleted, nor logged out.
    answered = [(r.url, r.status) for r in reached]
    assert answered and all(status in (401, 403) for _, status in answered), answered
    assert sessions_with(keyed, login).status_code == 200
    page.reload()
    expect(page.locator("#sessions tbody tr")).to_have_count(1)
    # The other port's server was handed the cookie, and nothing else: spent from there,
    # with every header the proxy's own page would send but the page token, it opens
    # no session.
    assert any(login.token in sent for sent in elsewhere.cookies), elsewhere.cookies
    assert not any(login.page in sent or KEY_A in sent for sent in elsewhere.cookies)
    for guess in ("1", login.token):
        replayed = sessions_with(keyed, login._replace(page=guess))
        assert replayed.status_code == 401, guess
    other.close()
    page.close()
