"""A commit applies by its deadline or never (fencing): a store that stalls in the middle
of a turn's commit (Redis frozen with SIGSTOP, SQLite's write lock held by another
process) makes the turn a 503, the stalled commit is refused when the store gets to it,
and the client's retry of the same turn is stored once."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from proxy.cli.local import held_port
from proxy.sessions.records import COMMIT_SECONDS
from tests.proxies import MODEL, proxy_config
from tests.redis_servers import redis_on
from tests.upstream import FakeUpstream, Reply

KEY = "fencing-key-0123456789"
STALL_SECONDS = 9.0  # past the commit's deadline, the wait for it, and the read-back


def chat(url: str, text: str, mode: str) -> httpx.Response:
    headers = {"authorization": f"Bearer {KEY}", "x-session-id": "s", "x-session-mode": mode}
    messages = [{"role": "user", "content": text}]
    if mode == "full":
        messages = [
            {"role": "user", "content": "before"},
            {"role": "assistant", "content": "echo: before"},
            *messages,
        ]
    body = {"model": MODEL, "messages": messages}
    return httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=60)


def stored(url: str) -> list[str]:
    response = httpx.get(url + "/v1/sessions/s", headers={"authorization": f"Bearer {KEY}"})
    assert response.status_code == 200, response.text
    return [m["content"] for m in response.json()["messages"]]


def stalled_turn(
    url: str, upstream: FakeUpstream, stall: Callable[[threading.Event], None], mode: str
) -> None:
    """A turn whose reply comes while the store stalls (`stall(back)` stalls it for
    STALL_SECONDS, then sets `back`): a 503 in bounded time, nothing stored then or once
    the store is back; the retry is stored once."""
    assert chat(url, "before", "append").status_code == 200
    stalled, back = threading.Event(), threading.Event()

    def stall_then_reply(body: dict[str, Any]) -> str:
        stall(back)
        stalled.set()
        return "the stalled reply"

    upstream.queue(Reply(respond=stall_then_reply))
    began = time.monotonic()
    response = chat(url, "the turn", mode)
    took = time.monotonic() - began
    assert stalled.is_set()
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "store_unavailable"
    assert took < COMMIT_SECONDS + STALL_SECONDS + 5, took  # bounded, never a hang
    assert back.wait(STALL_SECONDS + 30), "the store never came back"
    # The stalled commit reaches the store now, past its deadline: refused. (One applied
    # after this read would show in the retry's transcript below.)
    assert stored(url) == ["before", "echo: before"]  # the late commit never applied
    retried = chat(url, "the turn", mode)
    assert retried.status_code == 200, retried.text
    assert stored(url) == ["before", "echo: before", "the turn", "echo: the turn"]


@contextmanager
def proxy_on_redis(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str]
) -> Iterator[tuple[str, int]]:
    with held_port() as port, redis_on(port):
        session = {"store": "redis", "redis_url": f"redis://127.0.0.1:{port}/0"}
        url = start_proxy(proxy_config(upstream, session=session, auth={"keys": [{"key": KEY}]}))
        pid = int(redis.Redis(port=port).info("server")["process_id"])
        yield url, pid


@pytest.mark.parametrize("mode", ["append", "full"])
def test_redis_frozen_mid_commit_never_applies_the_turn_later(
    upstream: FakeUpstream, start_proxy: Callable[[dict[str, Any]], str], mode: str
) -> None:
    with proxy_on_redis(upstream, start_proxy) as (url, pid):

        def freeze(back: threading.Event) -> None:
            def thaw() -> None:
                os.kill(pid, signal.SIGCONT)
                back.set()

            os.kill(pid, signal.SIGSTOP)
            threading.Timer(STALL_SECONDS, thaw).start()

        stalled_turn(url, upstream, freeze, mode)


@pytest.mark.parametrize("mode", ["append", "full"])
def test_the_disk_store_stalled_mid_commit_never_applies_the_turn_later(
    upstream: FakeUpstream,
    start_proxy: Callable[[dict[str, Any]], str],
    tmp_path: Path,
    mode: str,
) -> None:
    session = {"path": str(tmp_path / "store")}
    url = start_proxy(proxy_config(upstream, session=session, auth={"keys": [{"key": KEY}]}))
    database = tmp_path / "store" / "sessions.sqlite3"

    def hold_the_write_lock(back: threading.Event) -> None:
        """Another process's long write transaction, as a stalled disk would make one."""
        held = threading.Event()

        def hold() -> None:
            connection = sqlite3.connect(database, isolation_level=None)
            connection.execute("BEGIN IMMEDIATE")
            held.set()
            time.sleep(STALL_SECONDS)  # the stall itself
            connection.execute("ROLLBACK")
            connection.close()
            back.set()

        threading.Thread(target=hold, daemon=True).start()
        assert held.wait(10)

    stalled_turn(url, upstream, hold_the_write_lock, mode)
