"""The session viewer at `/ui`, in a real headless Chromium (Debian's, driven by
Playwright): behind the keys, one tenant's sessions only (an admin's: every tenant's),
searchable, each turn's parts drawn as a token bar with what was sent, the tokens and
money saved, and delete. Screenshots are checked for the bar's colours."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from PIL import Image
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.benchmarks.scorecard import generate
from tests.conftest import MODEL
from tests.integration.test_auth import ADMIN, KEY_A, KEY_B, KEYS
from tests.integration.test_messages import claude_config
from tests.integration.test_recall_memory import client, drive, start
from tests.integration.test_session_ids import WORDS, make_sessions
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
def url(upstream: FakeUpstream, start_proxy) -> str:
    url = start(start_proxy, upstream, auth=KEYS)
    drive(client(url, SESSION, key=KEY_A), MODEL, generate(turns=60, facts=10, updates=3))
    drive(client(url, "team-b-notes", key=KEY_B), MODEL, generate(turns=20, facts=3, updates=1))
    return url


def logged_in(browser: Browser, url: str, key: str) -> Page:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(url + "/ui")
    page.fill("#key", key)
    page.click("#login-form button")
    expect(page.locator("#list")).to_be_visible()
    return page


def colours(png: bytes) -> set[tuple[int, int, int]]:
    image = Image.open(io.BytesIO(png)).convert("RGB")
    return {colour for _, colour in image.getcolors(maxcolors=1 << 20) or []}


def test_the_page_needs_a_key_and_its_assets_hold_no_data(url: str) -> None:
    page = httpx.get(url + "/ui")
    assert page.status_code == 401
    assert page.headers["content-type"].startswith("text/html")
    assert 'id="login-form"' in page.text and SESSION not in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    script = httpx.get(url + "/ui/viewer.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert httpx.get(url + "/ui", cookies={"context_proxy_key": "wrong"}).status_code == 401
    assert httpx.get(url + "/ui", cookies={"context_proxy_key": KEY_A}).status_code == 200
    # The cookie opens the page only: the API still wants the key in its header.
    assert httpx.get(url + "/v1/sessions", cookies={"context_proxy_key": KEY_A}).status_code == 401


def test_a_tenant_sees_its_sessions_turn_by_turn_and_deletes_one(
    url: str, browser: Browser, tmp_path: Any
) -> None:
    page = logged_in(browser, url, KEY_A)
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
        f"{url}/v1/sessions/{SESSION}/plans", headers={"Authorization": f"Bearer {KEY_A}"}
    ).json()["data"]
    turns = page.locator("#turns > li")
    expect(turns).to_have_count(len(plans))
    newest = turns.first
    latest = plans[-1]
    expect(newest).to_contain_text(f"{latest['tokens_sent']:,} of {latest['tokens_original']:,}")
    saved = sum(record["tokens_saved"] for record in plans)
    expect(page.locator("#tokens-saved")).to_have_text(f"{saved:,}")
    usd = sum(record["saved_usd"] for record in plans)
    expect(page.locator("#money-saved")).to_have_text(f"${usd:.6f}")
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
    gone = httpx.get(f"{url}/v1/sessions/{SESSION}", headers={"Authorization": f"Bearer {KEY_A}"})
    assert gone.status_code == 404
    page.close()


def test_an_admin_sees_every_tenant(url: str, browser: Browser) -> None:
    page = logged_in(browser, url, ADMIN)
    rows = page.locator("#sessions tbody tr")
    expect(rows).to_have_count(2)
    page.fill("#search", "team-b")
    expect(rows).to_have_count(1)
    rows.first.click()
    expect(page.locator("#session-title")).to_have_text("Session team-b-notes")
    plans = httpx.get(
        f"{url}/v1/sessions/team-b-notes/plans?tenant=team-b",
        headers={"Authorization": f"Bearer {ADMIN}"},
    ).json()["data"]
    expect(page.locator("#turns > li")).to_have_count(len(plans))
    assert len(plans) >= 10
    page.close()


def test_a_wrong_key_is_told_so(url: str, browser: Browser) -> None:
    page = browser.new_page()
    page.goto(url + "/ui")
    page.fill("#key", "not-a-key-at-all")
    page.click("#login-form button")
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#login-error")).to_contain_text("Invalid proxy key")
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
