"""`context-proxy sessions list|show|search|delete`: a running proxy's sessions API from a
shell.

The key comes from `--key` or `CONTEXT_PROXY_KEY` (an admin key lists every tenant's
sessions); the proxy from `--url` or `CONTEXT_PROXY_URL`. Errors are the proxy's own
one-line messages. A session is named as its id is, whatever it holds (`..`, `/`,
spaces, JSON, unicode): the API's `?id=` form carries any.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
import unicodedata
from typing import Any

import httpx

__all__ = ["add_parser", "run"]

URL_ENV = "CONTEXT_PROXY_URL"
KEY_ENV = "CONTEXT_PROXY_KEY"
DEFAULT_URL = "http://127.0.0.1:4000"
PREVIEW_CHARS = 100


def add_parser(commands: Any) -> None:
    sessions = commands.add_parser(
        "sessions", help="list, show or delete a running proxy's sessions"
    )
    sessions.add_argument("--url", help=f"the proxy (default: ${URL_ENV}, else {DEFAULT_URL})")
    sessions.add_argument("--key", help=f"a proxy key (default: ${KEY_ENV})")
    actions = sessions.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="sessions, with their size and last use")
    listing.add_argument("--tenant", help="an admin key: only this tenant's")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    for name, text in (
        ("show", "one session, turn by turn"),
        ("search", "a session's messages that best match a query"),
        ("delete", "delete a session"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("session_id")
        if name == "search":
            action.add_argument("query")
            action.add_argument("--limit", type=int, default=10, help="at most this many (10)")
        action.add_argument("--tenant", help="an admin key: the session's tenant")


def run(args: argparse.Namespace) -> int:
    url = (args.url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
    key = args.key or os.environ.get(KEY_ENV)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    query = {"tenant": args.tenant} if args.tenant else {}
    # An id or a message the terminal's encoding lacks is escaped, never a traceback.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
            if args.action == "list":
                _list(client, query, args.limit)
            elif args.action == "show":
                _show(client, args.session_id, query)
            elif args.action == "search":
                _search(client, args.session_id, args.query, args.limit, query)
            else:
                _call(client, "DELETE", SESSION, _named(args.session_id, query))
                print(f"deleted {args.session_id}")
    except _Failed as exc:
        print(f"context-proxy: {exc}", file=sys.stderr)
        return 1
    return 0


class _Failed(Exception):
    pass


def _call(client: httpx.Client, method: str, path: str, query: dict[str, str]) -> Any:
    try:
        response = client.request(method, path, params=query)
    except httpx.HTTPError as exc:
        raise _Failed(f"cannot reach {client.base_url}: {exc}") from None
    try:
        body = response.json()
    except ValueError:
        body = {}
    if response.is_error:
        message = (body.get("error") or {}).get("message") if isinstance(body, dict) else None
        raise _Failed(f"{response.status_code}: {message or response.reason_phrase}")
    return body


# A session named by `?id=` rather than in the path: any id, `..` and `/` included.
SESSION = "/v1/sessions/-"


def _named(session_id: str, query: dict[str, str]) -> dict[str, str]:
    return {**query, "id": session_id}


def _list(client: httpx.Client, query: dict[str, str], limit: int) -> None:
    rows: list[dict[str, Any]]
    rows, after = [], None
    while len(rows) < limit:
        page = _call(
            client,
            "GET",
            "/v1/sessions",
            {**query, "limit": str(min(100, limit - len(rows)))}
            | ({"after": after} if after else {}),
        )
        rows += page["data"]
        after = page.get("next_after")
        if not page.get("has_more"):
            break
    # Columns as wide as their widest cell (as a terminal draws it), so every id is
    # shown whole, ready to copy, and the columns stay aligned whatever the ids hold.
    ids = [row["id"] for row in rows]
    tenants = [row["tenant"] for row in rows]
    id_width = max(map(_width, [*ids, "SESSION"]))
    tenant_width = max(map(_width, [*tenants, "TENANT"]))
    print(f"{_pad('SESSION', id_width)} {_pad('TENANT', tenant_width)} {'MESSAGES':>8}  UPDATED")
    for row in rows:
        print(
            f"{_pad(row['id'], id_width)} {_pad(row['tenant'], tenant_width)}"
            f" {row['messages']:>8}  {_when(row['updated'])}"
        )


def _show(client: httpx.Client, session_id: str, query: dict[str, str]) -> None:
    session = _call(client, "GET", SESSION, _named(session_id, query))
    plans = _call(client, "GET", SESSION + "/plans", _named(session_id, query))["data"]
    saved = sum(record["tokens_saved"] for record in plans)
    print(f"session   {session['id']}")
    print(f"messages  {len(session['messages'])}, summaries {len(session['checkpoints'])}")
    print(f"updated   {_when(session['updated'])}")
    print(f"not sent  {saved} tokens over the {len(plans)} turns recorded")
    receipt = session.get("receipt")
    if receipt is None:
        print("money     no price known for this session's model")
    else:
        print(
            f"money     spent ${receipt['spent']:.6f} (summaries ${receipt['summaries']:.6f}),"
            f" resending would have cost ${receipt['resend']:.6f}:"
            f" net saving ${receipt['net']:.6f} over {receipt['turns']} priced turns"
        )
    print()
    print(f"{'VERSION':>7} {'COMPRESSION':<11} {'SENT':>7} {'OF':>7} {'NOT SENT':>8}  PARTS")
    for record in plans:
        parts = ", ".join(f"{part['kind']} {_count(part['tokens'])}" for part in record["parts"])
        print(
            f"{record['version']:>7} {record['compression']:<11}"
            f" {_count(record['tokens_sent']):>7} {_count(record['tokens_original']):>7}"
            f" {record['tokens_saved']:>8}  {parts}"
        )


def _count(tokens: int | None) -> str:
    """A plan record's count; "-" for a turn sent whole uncounted (`SessionView.counted`)."""
    return "-" if tokens is None else str(tokens)


def _search(
    client: httpx.Client, session_id: str, words: str, limit: int, query: dict[str, str]
) -> None:
    found = _call(
        client,
        "GET",
        SESSION + "/search",
        _named(session_id, query) | {"q": words, "limit": str(limit)},
    )["data"]
    if not found:
        print("no message matches")
    for match in found:
        print(f"messages {match['start']}-{match['end'] - 1} ({', '.join(match['terms'])})")
        for at, message in enumerate(match["messages"], match["start"]):
            print(f"  {at:>5} {message.get('role', '?'):<9} {_preview(message)}")


def _preview(message: dict[str, Any]) -> str:
    """A message on one line: its text (else its parts or tool calls as JSON), cut short."""
    content = message.get("content") or message.get("tool_calls") or ""
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return _cut(" ".join(text.split()), PREVIEW_CHARS)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _width(text: str) -> int:
    """Columns a terminal gives `text`: two for a wide character (CJK, most emoji), none
    for a combining mark or a joiner."""
    return sum(
        0
        if unicodedata.combining(char) or unicodedata.category(char) == "Cf"
        else 2
        if unicodedata.east_asian_width(char) in ("W", "F")
        else 1
        for char in text
    )


def _pad(text: str, width: int) -> str:
    return text + " " * (width - _width(text))


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))
