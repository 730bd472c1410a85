"""`context-proxy sessions list|show|delete`: a running proxy's sessions API from a shell.

The key comes from `--key` or `CONTEXT_PROXY_KEY` (an admin key lists every tenant's
sessions); the proxy from `--url` or `CONTEXT_PROXY_URL`. Errors are the proxy's own
one-line messages.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any
from urllib.parse import quote

import httpx

__all__ = ["add_parser", "run"]

URL_ENV = "CONTEXT_PROXY_URL"
KEY_ENV = "CONTEXT_PROXY_KEY"
DEFAULT_URL = "http://127.0.0.1:4000"


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
    for name, text in (("show", "one session, turn by turn"), ("delete", "delete a session")):
        action = actions.add_parser(name, help=text)
        action.add_argument("session_id")
        action.add_argument("--tenant", help="an admin key: the session's tenant")


def run(args: argparse.Namespace) -> int:
    url = (args.url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
    key = args.key or os.environ.get(KEY_ENV)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    query = {"tenant": args.tenant} if args.tenant else {}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
            if args.action == "list":
                _list(client, query, args.limit)
            elif args.action == "show":
                _show(client, args.session_id, query)
            else:
                _call(client, "DELETE", _path(args.session_id), query)
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


def _path(session_id: str) -> str:
    return f"/v1/sessions/{quote(session_id, safe='')}"


def _list(client: httpx.Client, query: dict[str, str], limit: int) -> None:
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
    print(f"{'SESSION':<40} {'TENANT':<24} {'MESSAGES':>8}  UPDATED")
    for row in rows:
        print(f"{row['id']:<40} {row['tenant']:<24} {row['messages']:>8}  {_when(row['updated'])}")


def _show(client: httpx.Client, session_id: str, query: dict[str, str]) -> None:
    session = _call(client, "GET", _path(session_id), query)
    plans = _call(client, "GET", _path(session_id) + "/plans", query)["data"]
    saved = sum(record["tokens_saved"] for record in plans)
    priced = [record["saved_usd"] for record in plans if record["saved_usd"] is not None]
    usd = f"${sum(priced):.6f}" if priced else "unknown"
    print(f"session   {session['id']}")
    print(f"messages  {len(session['messages'])}, summaries {len(session['checkpoints'])}")
    print(f"updated   {_when(session['updated'])}")
    print(f"saved     {saved} tokens ({usd}) over the {len(plans)} turns recorded")
    print()
    print(f"{'VERSION':>7} {'COMPRESSION':<11} {'SENT':>7} {'OF':>7} {'SAVED':>7}  PARTS")
    for record in plans:
        parts = ", ".join(f"{part['kind']} {part['tokens']}" for part in record["parts"])
        print(
            f"{record['version']:>7} {record['compression']:<11} {record['tokens_sent']:>7}"
            f" {record['tokens_original']:>7} {record['tokens_saved']:>7}  {parts}"
        )


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))
