"""Any session id a client can send works everywhere: `.`, `..`, `-`, `/`, spaces with
`%`, `?`, `#`, unicode, and Claude Code's `metadata.user_id` (whose inner `session_id` is
the session). Each is made by a real request, then listed, shown, searched and deleted
through the sessions API (`?id=`, the path's segment `-`) and the sessions CLI; one
tenant never reaches another's. The viewer's side is in test_viewer.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import unicodedata
from typing import Any
from urllib.parse import quote

import anthropic
import httpx
import openai
import pytest

from tests.integration.test_auth import ADMIN, KEY_A, KEY_B, KEYS
from tests.integration.test_cli import cli
from tests.integration.test_messages import CLAUDE, claude_config
from tests.proxies import MODEL
from tests.readme import on_port, snippet
from tests.upstream import FakeUpstream

# Sent in the session header: label -> id. The unicode one as its UTF-8 bytes.
HEADER_IDS = {
    "dot": ".",
    "dots": "..",
    "dash": "-",
    "slash": "notes/plans",  # `/v1/sessions/notes%2Fplans` would reach notes' plans
    "spaces": "a b %41 ?x=1 #frag &+",
    "unicode": "café ☕ 日本語",
}
CLAUDE_SESSION = "3f1c2a9e-8b7d-4c6e-9f10-2a3b4c5d6e7f"
CLAUDE_USER_ID = json.dumps(
    {"device_id": "d" * 64, "account_uuid": "", "session_id": CLAUDE_SESSION},
    separators=(",", ":"),
)
RESPONSES_ID = "über ✓ Ω"  # a body field carries any JSON string
# One word per session, said in its first turn: what a search finds.
WORDS = {
    "dot": "aardvark",
    "dots": "bison",
    "dash": "cheetah",
    "slash": "dingo",
    "spaces": "ferret",
    "unicode": "gecko",
    "claude": "heron",
    "responses": "ibis",
}


def make_sessions(url: str, key: str = KEY_A) -> dict[str, str]:
    """Each odd id's session, made through a real request: label -> the id stored."""
    made = dict(HEADER_IDS)
    for label, name in HEADER_IDS.items():
        answer = httpx.post(
            url + "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": f"a {WORDS[label]}"}]},
            headers={"Authorization": f"Bearer {key}", "X-Session-Id": name.encode()},
        )
        assert answer.status_code == 200, answer.text
    claude = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=30)
    claude.messages.create(
        model=CLAUDE,
        max_tokens=16,
        metadata={"user_id": CLAUDE_USER_ID},
        messages=[{"role": "user", "content": f"a {WORDS['claude']}"}],
    )
    made["claude"] = CLAUDE_SESSION
    sdk = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
    sdk.responses.create(
        model=MODEL, input=f"a {WORDS['responses']}", prompt_cache_key=RESPONSES_ID
    )
    made["responses"] = RESPONSES_ID
    return made


def api(
    url: str, method: str, path: str, key: str = KEY_A, json_body: Any = None, **query: str
) -> httpx.Response:
    return httpx.request(
        method,
        url + path,
        params=query,
        json=json_body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


def listed(url: str, key: str = KEY_A, **query: str) -> list[str]:
    page = api(url, "GET", "/v1/sessions", key, limit="100", **query)
    assert page.status_code == 200, page.text
    return [row["id"] for row in page.json()["data"]]


def columns(text: str) -> int:
    """Terminal columns: two for a wide character."""
    return sum(2 if unicodedata.east_asian_width(char) in ("W", "F") else 1 for char in text)


def said(session: dict[str, Any]) -> str:
    return " ".join(str(m["content"]) for m in session["messages"])


@pytest.fixture
def url_config(upstream: FakeUpstream, store: dict[str, Any]) -> dict[str, Any]:
    return claude_config(upstream, auth=KEYS, session=store)


def test_any_id_is_listed_shown_searched_and_deleted_through_the_api(url: str) -> None:
    made = make_sessions(url)
    assert set(made.values()) <= set(listed(url))
    # Claude Code's session is its inner `session_id`, not the whole user id.
    assert CLAUDE_USER_ID not in listed(url)
    for label, name in made.items():
        shown = api(url, "GET", "/v1/sessions/-", id=name)
        assert shown.status_code == 200, (label, shown.text)
        assert shown.json()["id"] == name
        assert WORDS[label] in said(shown.json())
        found = api(url, "GET", "/v1/sessions/-/search", id=name, q=WORDS[label])
        assert found.status_code == 200, (label, found.text)
        assert WORDS[label] in json.dumps(found.json()["data"][0]["messages"])
        plans = api(url, "GET", "/v1/sessions/-/plans", id=name)
        assert len(plans.json()["data"]) == 1, (label, plans.text)
        preview = api(url, "POST", "/v1/sessions/-/preview", json_body={"model": MODEL}, id=name)
        assert preview.status_code == 200, (label, preview.text)

    # Percent-encoded in the path works too, for an id a client leaves whole there (httpx
    # removes a literal `..` segment, not `%2E%2E`).
    for name, segment in [
        ("..", "%2E%2E"),
        (".", "%2E"),
        ("-", "-"),
        (made["spaces"], quote(made["spaces"], safe="")),
        (made["unicode"], quote(made["unicode"], safe="")),
    ]:
        shown = api(url, "GET", f"/v1/sessions/{segment}")
        assert shown.status_code == 200 and shown.json()["id"] == name, shown.text
    # A `/` splits the segment, even as %2F: refused, never another session's plans.
    split = api(url, "GET", "/v1/sessions/notes%2Fplans")
    assert split.status_code == 400, split.text
    assert split.json()["error"]["code"] == "invalid_session_id"
    assert "?id=" in split.json()["error"]["message"]

    for label, name in made.items():
        deleted = api(url, "DELETE", "/v1/sessions/-", id=name)
        assert deleted.json() == {"id": name, "object": "session.deleted", "deleted": True}, label
        assert api(url, "GET", "/v1/sessions/-", id=name).status_code == 404
    assert not set(made.values()) & set(listed(url))


def test_one_tenant_never_reaches_anothers_odd_ids(url: str) -> None:
    made = make_sessions(url)
    for name in made.values():
        for method, path in [
            ("GET", "/v1/sessions/-"),
            ("GET", "/v1/sessions/-/plans"),
            ("DELETE", "/v1/sessions/-"),
        ]:
            answer = api(url, method, path, KEY_B, id=name)
            assert answer.status_code == 404, (name, method, path, answer.text)
            assert answer.json()["error"]["code"] == "session_not_found"
    assert not set(made.values()) & set(listed(url, KEY_B))
    # The same id under another key is another, fresh session.
    make_sessions(url, KEY_B)
    theirs = api(url, "GET", "/v1/sessions/-", KEY_B, id="..").json()
    assert theirs["stats"]["messages"] == 2
    # An admin names the tenant.
    assert set(made.values()) <= set(listed(url, ADMIN, tenant="team-a"))
    ours = api(url, "GET", "/v1/sessions/-", ADMIN, id="..", tenant="team-a")
    assert ours.status_code == 200 and WORDS["dots"] in said(ours.json())
    for key in (KEY_A, KEY_B):  # the Redis server is the whole test run's
        for name in made.values():
            assert api(url, "DELETE", "/v1/sessions/-", key, id=name).status_code == 200


def test_an_unusable_id_is_a_clear_400(upstream: FakeUpstream, start_proxy: Any) -> None:
    """Empty, longer than 256 characters, a control character, a header that is not
    UTF-8, or `id` beside a segment other than `-`: a 400 naming where, nothing stored
    and the upstream never called."""
    url = start_proxy(claude_config(upstream, auth=KEYS))
    for path, query, param in [
        ("/v1/sessions/-", {"id": ""}, "id"),
        ("/v1/sessions/-", {"id": "a\nb"}, "id"),
        ("/v1/sessions/-", {"id": "s" * 257}, "id"),
        ("/v1/sessions/%00", {}, "session_id"),
        ("/v1/memories/-", {"id": "\x7f"}, "id"),
    ]:
        answer = api(url, "GET", path, **query)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert (error["code"], error["param"]) == ("invalid_session_id", param), error
    beside = api(url, "GET", "/v1/sessions/other", id="..")
    assert beside.status_code == 400
    assert (beside.json()["error"]["code"], beside.json()["error"]["param"]) == (
        "invalid_value",
        "id",
    )
    for header, why in [
        ("caf\xe9".encode("latin-1"), "UTF-8"),  # latin-1 bytes, not UTF-8
        (b"s" * 257, "1-256 characters"),
    ]:
        answer = httpx.post(
            url + "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": f"Bearer {KEY_A}", "X-Session-Id": header},
        )
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert (error["code"], error["param"]) == ("invalid_session_id", "X-Session-Id")
        assert why in error["message"]
    assert upstream.requests == []
    assert listed(url) == []


def test_the_cli_lists_shows_searches_and_deletes_any_id(
    upstream: FakeUpstream, start_proxy: Any
) -> None:
    url = start_proxy(claude_config(upstream, auth=KEYS))
    made = make_sessions(url)
    listing = cli("sessions", "--url", url, "list", key=KEY_A)
    assert listing.returncode == 0, listing.stderr
    header, *rows = listing.stdout.splitlines()
    assert header.split() == ["SESSION", "TENANT", "MESSAGES", "UPDATED"]
    for name in made.values():
        # Each id whole, and the next column where the header's is, as a terminal draws
        # it (a wide character takes two columns).
        row = next(row for row in rows if row.startswith(name + " "))
        rest = row[len(name) :]
        assert columns(name) + len(rest) - len(rest.lstrip(" ")) == header.index("TENANT")
        assert re.fullmatch(r" +team-a +2  [\d-]{10} [\d:]{8}", rest), row

    for label, name in made.items():
        shown = cli("sessions", "--url", url, "show", name, key=KEY_A)
        assert shown.returncode == 0, (label, shown.stderr)
        assert f"session   {name}\n" in shown.stdout
        assert "messages  2, summaries 0" in shown.stdout
        found = cli("sessions", "--url", url, "search", name, WORDS[label], key=KEY_A)
        assert found.returncode == 0, (label, found.stderr)
        assert re.search(rf"^messages 0-\d+ \({WORDS[label]}\)$", found.stdout, re.M), found.stdout
        assert re.search(rf"^ +0 user +a {WORDS[label]}$", found.stdout, re.M), found.stdout

    refused = cli("sessions", "--url", url, "delete", "..", key=KEY_B)
    assert refused.returncode == 1 and refused.stderr == "context-proxy: 404: No session `..`.\n"
    for name in made.values():
        deleted = cli("sessions", "--url", url, "delete", name, key=KEY_A)
        assert deleted.returncode == 0 and deleted.stdout == f"deleted {name}\n", deleted.stderr
        assert api(url, "GET", "/v1/sessions/-", id=name).status_code == 404


def test_the_readme_names_an_odd_id_with_curl(upstream: FakeUpstream, start_proxy: Any) -> None:
    """The `?id=` block of docs/operations.md (Sessions), as pasted: a unicode id with a
    space and `#` sent in the header as curl sends it (UTF-8), then shown, searched and
    deleted."""
    url = start_proxy(claude_config(upstream, auth=KEYS))
    block = snippet('-H "X-Session-Id: café')
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", on_port(block.text, int(url.rsplit(":", 1)[1]))],
        env={**os.environ, "PROXY_API_KEY": KEY_A},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    decoder, documents = json.JSONDecoder(), []
    text = done.stdout
    while text.strip():
        document, end = decoder.raw_decode(text.lstrip())
        documents.append(document)
        text = text.lstrip()[end:]
    reply, shown, found, deleted = documents
    assert reply["choices"][0]["message"]["content"] == "echo: Hello."
    assert shown["id"] == "café ☕ #1" and said(shown) == "Hello. echo: Hello."
    assert "Hello." in [m["content"] for match in found["data"] for m in match["messages"]]
    assert deleted == {"id": "café ☕ #1", "object": "session.deleted", "deleted": True}
