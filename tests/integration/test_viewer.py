"""The session viewer at `/ui`, in a real headless Chromium (Debian's, driven by
Playwright): behind the keys, one tenant's sessions only (an admin's: every tenant's),
searchable, each turn's parts drawn as a token bar with what was sent, the tokens not
sent and the money (the session's receipt, net of the prompt cache), and delete.
Screenshots are checked for the bar's colours.

Its login, over HTTP: the key is exchanged for a token of the proxy's making, in an
HttpOnly, SameSite=Strict cookie on `/ui` named for the port, which expires, is revoked
on logout, opens the viewer's API only for the viewer's own page, and is kept in the
store as a hash, by every worker. (Another origin in Chromium: test_browser.py.)"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httpx
import pytest
import yaml
from PIL import Image
from playwright.sync_api import Browser, Page, expect, sync_playwright

from proxy.cli.local import held_port
from proxy.http import viewer
from proxy.http.browser import PAGE_HEADER
from tests.benchmarks.scorecard import generate
from tests.integration.test_auth import ADMIN, KEY_A, KEY_B, KEYS
from tests.integration.test_messages import claude_config
from tests.integration.test_recall_memory import client, drive, start
from tests.integration.test_secrets import store_bytes
from tests.integration.test_session_ids import WORDS, make_sessions
from tests.proxies import MODEL, proxy_config
from tests.servers import proxy_command, stop, wait_ready
from tests.upstream import FakeUpstream

SESSION = "viewer-demo"
# The token bar's colours (proxy/static/viewer.css) for the parts every long turn has.
SUMMARY = (0x25, 0x63, 0xEB)
WINDOW = (0xDC, 0x26, 0x26)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    chromium = shutil.which("chromium")
    assert chromium, "Chromium is installed by tests/install.sh"
    # Chromium's profile and crash reports go to the temp dir, not the home.
    config = tmp_path_factory.mktemp("chromium")
    env = {**os.environ, "XDG_CONFIG_HOME": str(config), "XDG_CACHE_HOME": str(config)}
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium, args=["--no-sandbox"], env=env
        )
        yield launched
        launched.close()


@pytest.fixture
def demo_url(upstream: FakeUpstream, start_proxy) -> str:
    """A proxy holding a long session of each tenant's, as the viewer's users have them."""
    url = start(start_proxy, upstream, auth=KEYS)
    drive(client(url, SESSION, key=KEY_A), MODEL, generate(turns=60, facts=10, updates=3))
    drive(client(url, "team-b-notes", key=KEY_B), MODEL, generate(turns=20, facts=3, updates=1))
    return url


def logged_in(browser: Browser, url: str, key: str) -> Page:
    """A page of a browser context of its own, logged in with `key` through the form."""
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(url + "/ui")
    page.fill("#key", key)
    page.click("#login-form button")
    expect(page.locator("#list")).to_be_visible()
    return page


def colours(png: bytes) -> set[tuple[int, int, int]]:
    image = Image.open(io.BytesIO(png)).convert("RGB")
    return {colour for _, colour in image.getcolors(maxcolors=1 << 20) or []}


def test_the_page_needs_a_key_and_its_assets_hold_no_data(demo_url: str) -> None:
    page = httpx.get(demo_url + "/ui")
    assert page.status_code == 401
    assert page.headers["content-type"].startswith("text/html")
    assert 'id="login-form"' in page.text and SESSION not in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    script = httpx.get(demo_url + "/ui/viewer.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    # A key opens the page and its API in the header only, never in a cookie.
    assert (
        httpx.get(demo_url + "/ui", headers={"Authorization": f"Bearer {KEY_A}"}).status_code == 200
    )
    for name in ("context_proxy_key", cookie(demo_url)):
        jar = {name: KEY_A}
        assert httpx.get(demo_url + "/ui", cookies=jar, headers=own(demo_url)).status_code == 401
        assert (
            httpx.get(demo_url + "/ui/api/sessions", cookies=jar, headers=own(demo_url)).status_code
            == 401
        )


def dollars(value: float) -> str:
    """A figure as the viewer writes it."""
    return f"{'-' if value < 0 else ''}${abs(value):.6f}"


def test_a_tenant_sees_its_sessions_turn_by_turn_and_deletes_one(
    demo_url: str, browser: Browser, tmp_path: Any
) -> None:
    page = logged_in(browser, demo_url, KEY_A)
    rows = page.locator("#sessions tbody tr")
    expect(rows).to_have_count(1)  # team-b's session is not listed
    expect(rows.first).to_contain_text(SESSION)
    page.fill("#search", "no-such-session")
    expect(rows).to_have_count(0)
    page.fill("#search", "demo")
    expect(rows).to_have_count(1)
    page.screenshot(path=str(tmp_path / "list.png"))

    rows.first.click()
    expect(page.locator("#session-title")).to_have_text(f"Session {SESSION}")
    plans = httpx.get(
        f"{demo_url}/v1/sessions/{SESSION}/plans", headers={"Authorization": f"Bearer {KEY_A}"}
    ).json()["data"]
    turns = page.locator("#turns > li")
    expect(turns).to_have_count(len(plans))
    newest = turns.first
    latest = plans[-1]
    expect(newest).to_contain_text(f"{latest['tokens_sent']:,} of {latest['tokens_original']:,}")
    saved = sum(record["tokens_saved"] for record in plans)
    expect(page.locator("#tokens-saved")).to_have_text(f"{saved:,}")
    # The session's receipt, net of the prompt cache, and how it is computed.
    receipt = httpx.get(
        f"{demo_url}/v1/sessions/{SESSION}", headers={"Authorization": f"Bearer {KEY_A}"}
    ).json()["receipt"]
    for kind in ("spent", "summaries", "resend", "net"):
        expect(page.locator(f"#receipt-{kind}")).to_have_text(dollars(receipt[kind]))
    expect(page.locator("#receipt-note")).to_contain_text("How this is computed")
    expect(newest).to_contain_text(f"net {dollars(latest['cost']['net'])}")
    # One bar segment per part sent, and the parts drawn, with their messages.
    kinds = [part["kind"] for part in latest["parts"]]
    expect(newest.locator(".tokens span")).to_have_count(len(kinds))
    assert {"summary", "pinned", "window"} <= set(kinds)
    newest.locator("details summary").click()
    expect(newest.locator(".part-summary .message").first).to_be_visible()
    expect(newest.locator(".part-pinned li").first).to_be_visible()
    start_at, end = next(p["range"] for p in latest["parts"] if p["kind"] == "window")
    expect(newest.locator(".part-window .message")).to_have_count(end - start_at)
    bar = newest.locator(".tokens").screenshot(path=str(tmp_path / "bar.png"))
    assert {SUMMARY, WINDOW} <= colours(bar)
    page.screenshot(path=str(tmp_path / "session.png"), full_page=True)
    assert {SUMMARY, WINDOW} <= colours((tmp_path / "session.png").read_bytes())

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#delete")
    expect(page.locator("#list")).to_be_visible()
    expect(rows).to_have_count(0)
    gone = httpx.get(
        f"{demo_url}/v1/sessions/{SESSION}", headers={"Authorization": f"Bearer {KEY_A}"}
    )
    assert gone.status_code == 404
    page.close()


def test_a_turn_sent_whole_uncounted_says_so(
    upstream: FakeUpstream, start_proxy, browser: Browser
) -> None:
    """A session opened with a long conversation far from its budget is not tokenized
    (docs/memory.md): its turn says so, rather than "0 of 0 tokens"."""
    config = proxy_config(upstream, auth=KEYS)
    config["model_list"][0]["model_info"] = {"max_input_tokens": 1_000_000}
    url = start_proxy(config)
    long = [{"role": "user", "content": f"note {i}: " + "word " * 30} for i in range(300)]
    reply = client(url, "long-opening", key=KEY_A).chat.completions.with_raw_response.create(
        model=MODEL, messages=long
    )
    assert "X-Context-Tokens-Sent" not in reply.headers
    page = logged_in(browser, url, KEY_A)
    page.locator("#sessions tbody tr").first.click()
    turn = page.locator("#turns > li").first
    expect(turn).to_contain_text("Sent whole, far from the budget: not counted")
    expect(turn).not_to_contain_text("0 of 0 tokens")
    page.close()


def test_an_admin_sees_every_tenant(demo_url: str, browser: Browser) -> None:
    page = logged_in(browser, demo_url, ADMIN)
    rows = page.locator("#sessions tbody tr")
    expect(rows).to_have_count(2)
    page.fill("#search", "team-b")
    expect(rows).to_have_count(1)
    rows.first.click()
    expect(page.locator("#session-title")).to_have_text("Session team-b-notes")
    plans = httpx.get(
        f"{demo_url}/v1/sessions/team-b-notes/plans?tenant=team-b",
        headers={"Authorization": f"Bearer {ADMIN}"},
    ).json()["data"]
    expect(page.locator("#turns > li")).to_have_count(len(plans))
    assert len(plans) >= 10
    page.close()


def test_a_wrong_key_is_told_so(demo_url: str, browser: Browser) -> None:
    page = browser.new_page()
    page.goto(demo_url + "/ui")
    page.fill("#key", "not-a-key-at-all")
    page.click("#login-form button")
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#login-error")).to_contain_text("Invalid proxy key")
    assert page.context.cookies() == []
    page.close()


def test_the_page_holds_no_key_and_logs_out(demo_url: str, browser: Browser) -> None:
    """After the login the page's script can read no cookie and holds no key (its form
    is empty; its storage holds the page token only); the browser holds the proxy's
    token, HttpOnly and Strict, for 8 hours; logging out revokes the login, and the page
    asks for a key again."""
    page = logged_in(browser, demo_url, KEY_A)
    assert page.evaluate("document.cookie") == ""
    stored = page.evaluate("JSON.stringify([{...localStorage}, {...sessionStorage}])")
    [kept, _] = json.loads(stored)
    assert list(kept) == ["context-proxy-page-token"] and stored.count(":") == 1
    assert KEY_A not in stored
    expect(page.locator("#key")).to_have_value("")
    assert KEY_A not in page.content()
    [held] = page.context.cookies()
    assert held["name"] == cookie(demo_url) and KEY_A not in held["value"]
    assert (held["httpOnly"], held["sameSite"], held["path"], held["secure"]) == (
        True,
        "Strict",
        "/ui",
        False,  # plain http: Secure (and the `__Secure-` name) over https
    )
    assert abs(held["expires"] - (time.time() + viewer.LOGIN_SECONDS)) < 60
    login = Login(held["value"], kept["context-proxy-page-token"])
    assert sessions_with(demo_url, login).status_code == 200
    page.reload()  # the page itself opens with the login (a same-origin navigation)
    expect(page.locator("#list")).to_be_visible()
    page.click("#logout")
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#sessions tbody tr")).to_have_count(0)
    assert page.context.cookies() == []
    assert page.evaluate("localStorage.length") == 0
    assert sessions_with(demo_url, login).status_code == 401  # revoked, not only forgotten
    page.reload()
    expect(page.locator("#login")).to_be_visible()
    page.close()


def test_odd_session_ids_open_search_and_delete(
    upstream: FakeUpstream, start_proxy, browser: Browser
) -> None:
    """`.`, `..`, `-`, `/`, spaces with `%?#&+`, unicode and Claude Code's session (by its
    inner id): each opens (a browser would rewrite `..` or split `/` in a path; the
    viewer names the session by `?id=`), finds its own message, and is deleted."""
    url = start_proxy(claude_config(upstream, auth=KEYS))
    made = make_sessions(url)
    page = logged_in(browser, url, KEY_A)
    rows = page.locator("#sessions tbody tr")
    expect(rows).to_have_count(len(made))
    for left, (label, name) in enumerate(made.items()):
        cell = page.get_by_role("cell", name=name, exact=True)
        expect(cell).to_have_count(1)
        cell.click()
        expect(page.locator("#session-title")).to_have_text(f"Session {name}")
        expect(page.locator("#turns > li")).to_have_count(1)
        page.fill("#find", WORDS[label])
        page.press("#find", "Enter")
        expect(page.locator("#matches li").first).to_contain_text(f"a {WORDS[label]}")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#delete")
        expect(page.locator("#list")).to_be_visible()
        expect(rows).to_have_count(len(made) - left - 1)
        gone = httpx.get(
            url + "/v1/sessions/-",
            params={"id": name},
            headers={"Authorization": f"Bearer {KEY_A}"},
        )
        assert gone.status_code == 404, label
    page.close()


# -- the login, over HTTP -----------------------------------------------------------------


class Login(NamedTuple):
    token: str  # the cookie's
    page: str  # the page token, which the page keeps in its origin's storage


def cookie(url: str) -> str:
    """The login cookie's name at `url` (plain http)."""
    return f"context_proxy_viewer_{urlsplit(url).port}"


def own(url: str, page: str = "1", **more: str) -> dict[str, str]:
    """The headers Chromium sends with a call of the viewer's own script."""
    return {"Origin": url, "Sec-Fetch-Site": "same-origin", PAGE_HEADER: page, **more}


def log_in(url: str, key: str, **headers: str) -> httpx.Response:
    return httpx.post(
        url + "/ui/login", headers={**own(url), "Authorization": f"Bearer {key}", **headers}
    )


def login_of(answer: httpx.Response, url: str) -> Login:
    assert answer.status_code == 200, answer.text
    return Login(answer.cookies[cookie(url)], answer.json()["page_token"])


def sessions_with(
    url: str, login: Login, path: str = "/ui/api/sessions", method: str = "GET", **headers: str
) -> httpx.Response:
    return httpx.request(
        method,
        url + path,
        cookies={cookie(url): login.token},
        headers={**own(url, login.page), **headers},
    )


def log_out(url: str, login: Login, **headers: str) -> httpx.Response:
    return sessions_with(url, login, "/ui/logout", "POST", **headers)


def attributes(set_cookie: str) -> dict[str, str]:
    pairs = [part.strip().partition("=") for part in set_cookie.split(";")]
    return {name.lower(): value for name, _, value in pairs[1:]}


@pytest.fixture
def keyed(upstream: FakeUpstream, start_proxy) -> str:
    """A proxy with keys, and a short session of each tenant's."""
    url = start_proxy(proxy_config(upstream, auth=KEYS))
    for key, name in ((KEY_A, "a-notes"), (KEY_B, "b-notes")):
        answer = httpx.post(
            url + "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "remember this"}]},
            headers={"Authorization": f"Bearer {key}", "X-Session-Id": name},
        )
        assert answer.status_code == 200, answer.text
    return url


def test_a_login_is_a_token_of_the_proxys_in_an_httponly_strict_cookie(keyed: str) -> None:
    answer = log_in(keyed, KEY_A)
    [set_cookie] = answer.headers.get_list("set-cookie")
    assert KEY_A not in set_cookie and KEY_A not in str(answer.headers) + answer.text
    name, _, token = set_cookie.split(";")[0].partition("=")
    assert name == cookie(keyed) and len(token) >= 40
    assert attributes(set_cookie) == {
        "httponly": "",
        "max-age": str(viewer.LOGIN_SECONDS),
        "path": "/ui",
        "samesite": "strict",
    }
    assert answer.headers["cache-control"] == "no-store"
    body = answer.json()
    assert body["expires_in"] == viewer.LOGIN_SECONDS
    assert len(body["page_token"]) >= 40 and body["page_token"] != token
    login = Login(token, body["page_token"])
    # The login opens the page and the viewer's sessions API: team-a's sessions only.
    jar = {name: token}
    assert httpx.get(keyed + "/ui", cookies=jar, headers=own(keyed)).status_code == 200
    typed = {"Sec-Fetch-Site": "none"}  # an address typed or bookmarked
    assert httpx.get(keyed + "/ui", cookies=jar, headers=typed).status_code == 200
    listed = sessions_with(keyed, login)
    assert listed.status_code == 200, listed.text
    assert [s["id"] for s in listed.json()["data"]] == ["a-notes"]
    one = sessions_with(keyed, login, "/ui/api/sessions/a-notes/plans")
    assert one.status_code == 200 and len(one.json()["data"]) == 1
    found = sessions_with(keyed, login, "/ui/api/sessions/-/search?id=a-notes&q=remember")
    assert found.status_code == 200, found.text
    assert sessions_with(keyed, login, "/ui/api/sessions/b-notes").status_code == 404
    tenant = sessions_with(keyed, login, "/ui/api/sessions?tenant=team-b")
    assert tenant.status_code == 403  # not an admin's login
    # An admin's login sees every tenant, and deletes.
    admin = login_of(log_in(keyed, ADMIN), keyed)
    every = sessions_with(keyed, admin).json()["data"]
    assert sorted(s["id"] for s in every) == ["a-notes", "b-notes"]
    deleted = sessions_with(keyed, admin, "/ui/api/sessions/b-notes?tenant=team-b", "DELETE")
    assert deleted.status_code == 200, deleted.text


def test_over_https_the_cookie_is_secure(keyed: str) -> None:
    """Behind a TLS terminator the proxy trusts (uvicorn's `X-Forwarded-Proto`, from
    loopback by default): `Secure`, and a `__Secure-` name no plain-http page can set."""
    https = {"X-Forwarded-Proto": "https"}
    answer = log_in(keyed, KEY_A, **https)
    assert answer.status_code == 200, answer.text
    name, _, token = answer.headers["set-cookie"].split(";")[0].partition("=")
    assert name == f"__Secure-{cookie(keyed)}"
    assert "secure" in attributes(answer.headers["set-cookie"])
    mine = own(keyed, answer.json()["page_token"], **https)
    listed = httpx.get(keyed + "/ui/api/sessions", cookies={name: token}, headers=mine)
    assert listed.status_code == 200, listed.text
    plain = httpx.get(keyed + "/ui/api/sessions", cookies={name: token}, headers=own(keyed))
    assert plain.status_code == 401  # over plain http the cookie has another name
    out = httpx.post(keyed + "/ui/logout", cookies={name: token}, headers=mine)
    assert out.headers["set-cookie"].startswith(f'{name}="";')
    assert "secure" in attributes(out.headers["set-cookie"])


def test_the_cookie_alone_opens_nothing_but_the_page(keyed: str) -> None:
    """A browser sends the cookie to every port of the host (a server there is handed
    it): without the page token, kept in the proxy's origin's storage, it opens only the
    page, which holds no data."""
    login = login_of(log_in(keyed, KEY_A), keyed)
    other = login_of(log_in(keyed, KEY_A), keyed)  # another browser's login
    assert sessions_with(keyed, login).status_code == 200
    for page in ("1", other.page, login.token, login.page[:-1]):
        assert sessions_with(keyed, login._replace(page=page)).status_code == 401, page
    assert sessions_with(keyed, login).status_code == 200
    page = httpx.get(keyed + "/ui", cookies={cookie(keyed): login.token}, headers=own(keyed))
    assert page.status_code == 200 and "a-notes" not in page.text


def test_the_login_opens_nothing_but_the_viewer_from_its_own_page(keyed: str) -> None:
    login = login_of(log_in(keyed, KEY_A), keyed)
    jar = {cookie(keyed): login.token}
    mine = own(keyed, login.page)
    assert sessions_with(keyed, login).status_code == 200
    # Not the API proper, nor a turn: those take keys only.
    assert httpx.get(keyed + "/v1/sessions", cookies=jar, headers=mine).status_code == 401
    turn = httpx.post(
        keyed + "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "spend it"}]},
        cookies=jar,
        headers=mine,
    )
    assert turn.status_code == 401
    # Not a call another page makes: another port of the host is the same site (the
    # browser sends it the cookie), so only the headers tell.
    other = "http://127.0.0.1:9"
    refusals = [
        {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "none"},  # a navigation, never a script's call
        {PAGE_HEADER: ""},
    ]
    for headers in refusals:
        assert sessions_with(keyed, login, **headers).status_code == 401, headers
    bare = httpx.get(keyed + "/ui/api/sessions", cookies=jar)  # no page's headers at all
    assert bare.status_code == 401
    refused = sessions_with(keyed, login, Origin=other)
    assert refused.status_code == 403  # the origin guard's, before the cookie is looked at
    page = httpx.get(keyed + "/ui", cookies=jar, headers={"Sec-Fetch-Site": "same-site"})
    assert page.status_code == 401  # a link from another port's page: the login form
    # Another origin can neither log in (nor out) nor be handed a cookie.
    for headers in ({"Sec-Fetch-Site": "same-site"}, {PAGE_HEADER: ""}, {"Origin": other}):
        answer = log_in(keyed, KEY_A, **headers)
        assert answer.status_code == 403 and "set-cookie" not in answer.headers, headers
        assert "page_token" not in answer.text
        out = log_out(keyed, login, **headers)
        assert out.status_code == 403 and "set-cookie" not in out.headers, headers
    assert sessions_with(keyed, login).status_code == 200


def test_a_wrong_or_missing_key_gets_no_login(keyed: str) -> None:
    wrong = log_in(keyed, "not-a-key-at-all")
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    assert wrong.json()["error"]["message"] == "Invalid proxy key."
    missing = httpx.post(keyed + "/ui/login", headers=own(keyed))
    assert missing.status_code == 401 and "set-cookie" not in missing.headers
    # A login is no key to log in with.
    login = login_of(log_in(keyed, KEY_A), keyed)
    again = httpx.post(
        keyed + "/ui/login", cookies={cookie(keyed): login.token}, headers=own(keyed, login.page)
    )
    assert again.status_code == 401 and "set-cookie" not in again.headers


def test_logout_revokes_the_login_and_clears_the_cookie(keyed: str) -> None:
    login = login_of(log_in(keyed, KEY_A), keyed)
    kept = login_of(log_in(keyed, KEY_A), keyed)  # another browser's login
    out = log_out(keyed, login)
    assert out.status_code == 204
    cleared = attributes(out.headers["set-cookie"])
    assert out.headers["set-cookie"].startswith(f'{cookie(keyed)}="";')
    assert cleared["max-age"] == "0" and cleared["path"] == "/ui"
    assert sessions_with(keyed, login).status_code == 401  # the token itself is dead
    assert sessions_with(keyed, kept).status_code == 200
    # Logging in again ends the login the browser held.
    fresh = log_in(keyed, KEY_A, Cookie=f"{cookie(keyed)}={kept.token}")
    assert sessions_with(keyed, kept).status_code == 401
    assert sessions_with(keyed, login_of(fresh, keyed)).status_code == 200
    # Logging out without a login, or a second time, clears the cookie all the same.
    assert httpx.post(keyed + "/ui/logout", headers=own(keyed)).status_code == 204
    assert log_out(keyed, login).status_code == 204


def test_the_login_expires(keyed: str, monkeypatch: pytest.MonkeyPatch) -> None:
    login = login_of(log_in(keyed, KEY_A), keyed)
    assert sessions_with(keyed, login).status_code == 200
    later = time.time() + viewer.LOGIN_SECONDS
    monkeypatch.setattr(viewer, "_clock", lambda: later - 60)
    assert sessions_with(keyed, login).status_code == 200
    monkeypatch.setattr(viewer, "_clock", lambda: later + 1)
    assert sessions_with(keyed, login).status_code == 401
    assert httpx.get(keyed + "/ui", cookies={cookie(keyed): login.token}).status_code == 401
    monkeypatch.undo()
    assert sessions_with(keyed, login).status_code == 401  # the expired login was deleted


def test_a_login_lasts_only_while_its_key_does(upstream: FakeUpstream, start_proxy) -> None:
    """A login is its key's: that key's rate limit applies to it, and removing the key
    from the config ends it (the store is kept across the restart)."""
    limited = {"keys": [{"key": KEY_A, "rpm": 3}, {"key": KEY_B}]}
    before = start_proxy(proxy_config(upstream, auth=limited))
    login = login_of(log_in(before, KEY_A), before)  # the first of its 3 a minute
    assert [sessions_with(before, login).status_code for _ in range(3)] == [200, 200, 429]

    after = start_proxy(proxy_config(upstream, auth={"keys": [{"key": KEY_B}]}))
    assert sessions_with(after, login).status_code == 401
    assert httpx.get(after + "/ui", cookies={cookie(after): login.token}).status_code == 401
    other = login_of(log_in(after, KEY_B), after)
    assert sessions_with(after, other).status_code == 200


def test_the_store_holds_hashes_not_the_key_nor_the_tokens(
    upstream: FakeUpstream, start_proxy, store: dict[str, Any], tmp_path: Path
) -> None:
    url = start_proxy(proxy_config(upstream, auth=KEYS, session=store))
    logins = [login_of(log_in(url, key), url) for key in (KEY_A, ADMIN)]
    assert all(sessions_with(url, login).status_code == 200 for login in logins)
    held = store_bytes({"store": "disk", **store}, tmp_path)
    for secret in (KEY_A, ADMIN, *(token for login in logins for token in login)):
        assert secret.encode() not in held
    for login in logins:
        for token in login:
            assert hashlib.sha256(token.encode()).hexdigest().encode() in held
    assert b"team-a" in held


def test_every_worker_knows_the_login(upstream: FakeUpstream, tmp_path: Path) -> None:
    """`serve --workers 2`: a login made by one worker opens the viewer on the other,
    and a logout on one ends it on both (the store keeps logins, not a worker). Neither
    the key nor the login reaches the log."""
    config = proxy_config(upstream, auth=KEYS, session={"path": str(tmp_path / "sessions")})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    with held_port() as port, (tmp_path / "proxy.log").open("w") as log:
        command = [*proxy_command("serve", "--config", str(path)), "--port", str(port)]
        command += ["--workers", "2"]
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, process)
            login = login_of(log_in(url, KEY_A), url)
            # A new connection each: the workers share them out.
            assert [sessions_with(url, login).status_code for _ in range(20)] == [200] * 20
            assert log_out(url, login).status_code == 204
            assert [sessions_with(url, login).status_code for _ in range(20)] == [401] * 20
        finally:
            stop(process)
    logged = (tmp_path / "proxy.log").read_text()
    assert "Uvicorn running" in logged or "Started" in logged, logged
    assert not any(secret in logged for secret in (KEY_A, *login)), "a secret in the log"
