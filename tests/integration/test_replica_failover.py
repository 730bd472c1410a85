"""Two `context-proxy serve` replicas sharing one Redis: a replica that dies in the middle
of a turn (SIGKILL) frees its session for the other within the lease (issue 36: 5 s),
and one that stalls past it (SIGSTOP, as a long GC pause or a frozen VM would) cannot
store its turn over the one the other replica served meanwhile. Either way the session
holds exactly the turns that finished: the dead or late turn never, the next one once."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from proxy.cli.local import held_port
from proxy.sessions.locks import LEASE_SECONDS
from tests.proxies import MODEL, proxy_config
from tests.servers import start, stop, wait_ready
from tests.upstream import FakeUpstream, Reply
from tests.waiting import eventually

KEY = "replica-failover-key-0123456789"
# The bound: a dead replica's sessions are free for the others within 5 s (the
# lease is 4.5 s). Past it: the waiting replica's poll (0.1 s), its own turn (a few ms
# here), and a loaded machine's scheduling. A correctness bound, not a benchmark.
FREED_SECONDS = 5.0
SLACK_SECONDS = 1.0


@contextmanager
def replicas(
    upstream: FakeUpstream, redis_url: str, directory: Path
) -> Iterator[list[tuple[str, subprocess.Popen[bytes]]]]:
    """Replicas A and B: (url, process) each, one Redis, one tenant secret."""
    session = {"store": "redis", "redis_url": redis_url, "tenant_secret": "shared-secret"}
    config = proxy_config(upstream, session=session, auth={"keys": [{"key": KEY}]})
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    with ExitStack() as stack:
        running = []
        for name in ("a", "b"):  # both started, then both waited for
            port = stack.enter_context(held_port())
            (directory / name).mkdir()
            args = ["--config", str(path), "--port", str(port)]
            process = start(args, directory / "net.log", directory / name)
            stack.callback(lambda p=process: print(stop(p)))
            running.append((f"http://127.0.0.1:{port}", process))
        for url, process in running:
            wait_ready(url, process)
        yield running


def chat(url: str, session: str, text: str) -> tuple[int, Any]:
    """(status, reply text or error code) of an append-mode turn; (0, None) if the
    replica went away before answering."""
    headers = {"authorization": f"Bearer {KEY}", "x-session-id": session}
    headers["x-session-mode"] = "append"
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}]}
    try:
        response = httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=60)
    except httpx.TransportError:
        return 0, None
    if response.status_code == 200:
        return 200, response.json()["choices"][0]["message"]["content"]
    return response.status_code, response.json()["error"].get("code")


def stored(url: str, session: str) -> list[str]:
    response = httpx.get(
        f"{url}/v1/sessions/{session}", headers={"authorization": f"Bearer {KEY}"}, timeout=10
    )
    assert response.status_code == 200, response.text
    return [m["content"] for m in response.json()["messages"]]


class Turn(threading.Thread):
    """A turn sent in the background; `result` once it is over, `ended` when it was."""

    def __init__(self, url: str, session: str, text: str) -> None:
        super().__init__(daemon=True)
        self.args_ = (url, session, text)
        self.result: tuple[int, Any] | None = None
        self.ended = 0.0
        self.start()

    def run(self) -> None:
        self.result = chat(*self.args_)
        self.ended = time.monotonic()

    def outcome(self) -> tuple[int, Any]:
        self.join(60)
        assert self.result is not None, "the turn never ended"
        return self.result


def calls(upstream: FakeUpstream) -> list[list[str]]:
    return [[m["content"] for m in r.body["messages"]] for r in upstream.chat_requests()]


def mid_turn(upstream: FakeUpstream, url: str, session: str, reply: Reply) -> Turn:
    """A turn on `url` that has reached the upstream (its session lock held) and gets
    `reply`."""
    before = len(upstream.chat_requests())
    upstream.queue(reply)
    turn = Turn(url, session, "unfinished")
    eventually(lambda: len(upstream.chat_requests()) > before, "the turn to reach the upstream")
    return turn


def outlives_its_first_term(redis_url: str, session: str) -> None:
    """Return once the session's turn lock in Redis has been held, by the one token it
    had when first seen, past the end of the term it had then (renewed meanwhile)."""
    raw = redis.Redis.from_url(redis_url)
    try:
        [lock] = raw.keys(f"*:{{*:{session}}}:turn")
        token, left = raw.get(lock), raw.pttl(lock)
        assert token is not None and 0 < left <= LEASE_SECONDS * 1000, (token, left)
        term_ends = time.monotonic() + left / 1000

        def past_it() -> bool:
            assert raw.get(lock) == token, "the lock changed hands or lapsed"
            return time.monotonic() > term_ends + SLACK_SECONDS

        eventually(past_it, "the lease to outlive its first term", seconds=4 * LEASE_SECONDS)
    finally:
        raw.close()


@pytest.mark.parametrize("waiting", [True, False], ids=["waiting", "after"])
def test_a_replica_killed_mid_turn_frees_its_session_within_the_lease(
    upstream: FakeUpstream, redis_url: str, tmp_path: Path, waiting: bool
) -> None:
    """A is killed while its turn waits on the upstream. B serves the session's next turn
    within the lease of the kill: a turn already waiting on B (for longer than a lease:
    A's renewals held it off until the kill), or one sent after it."""
    session = f"failover-{uuid.uuid4().hex}"
    with replicas(upstream, redis_url, tmp_path) as [(a_url, a), (b_url, _)]:
        assert chat(a_url, session, "seed") == (200, "echo: seed")
        unfinished = mid_turn(upstream, a_url, session, Reply(stall_seconds=30))
        if waiting:
            after = Turn(b_url, session, "after")
            outlives_its_first_term(redis_url, session)
            assert after.is_alive(), after.result  # still waiting: neither served nor 409
        a.kill()  # SIGKILL: no lock given back, nothing renews it any more
        killed = time.monotonic()
        if not waiting:
            after = Turn(b_url, session, "after")
        assert after.outcome() == (200, "echo: after")
        took = after.ended - killed
        print(f"failover: B answered {took:.2f} s after A was killed")
        assert took < FREED_SECONDS + SLACK_SECONDS, took
        assert unfinished.outcome() == (0, None)

        assert stored(b_url, session) == ["seed", "echo: seed", "after", "echo: after"]
        assert chat(b_url, session, "again") == (200, "echo: again")
        assert stored(b_url, session)[4:] == ["again", "echo: again"]
        assert calls(upstream) == [  # B's turn saw nothing of A's unfinished one
            ["seed"],
            ["seed", "echo: seed", "unfinished"],
            ["seed", "echo: seed", "after"],
            ["seed", "echo: seed", "after", "echo: after", "again"],
        ]


@pytest.mark.parametrize("b_stored_first", [False, True], ids=["b-running", "b-stored"])
def test_a_replica_stalled_past_its_lease_never_stores_over_the_next_turn(
    upstream: FakeUpstream, redis_url: str, tmp_path: Path, b_stored_first: bool
) -> None:
    """A stops (SIGSTOP) while its turn waits on the upstream, past its lease; B takes the
    session and serves its next turn. A, continued with its reply in hand, cannot store
    its turn, whether B's still runs or is stored: a 409, and the session holds B's turn
    once and nothing of A's."""
    session = f"stalled-{uuid.uuid4().hex}"
    with replicas(upstream, redis_url, tmp_path) as [(a_url, a), (b_url, _)]:
        assert chat(a_url, session, "seed") == (200, "echo: seed")
        late = mid_turn(upstream, a_url, session, Reply(stall_seconds=0.5))
        os.kill(a.pid, signal.SIGSTOP)  # its reply arrives; nothing of A runs
        try:
            stopped = time.monotonic()
            # B's own turn stalls on the upstream while A continues, or is over before.
            upstream.queue(Reply(stall_seconds=0 if b_stored_first else 4))
            after = Turn(b_url, session, "after")
            eventually(lambda: len(upstream.chat_requests()) == 3, "B's turn to reach upstream")
            assert time.monotonic() - stopped < FREED_SECONDS + SLACK_SECONDS
            if b_stored_first:
                assert after.outcome() == (200, "echo: after")
        finally:
            os.kill(a.pid, signal.SIGCONT)
        assert late.outcome() == (409, "conflict")
        assert after.outcome() == (200, "echo: after")
        if not b_stored_first:
            assert late.ended < after.ended  # A's commit was tried while B's turn ran

        assert stored(a_url, session) == ["seed", "echo: seed", "after", "echo: after"]
        assert chat(a_url, session, "again") == (200, "echo: again")  # A serves on
        assert stored(b_url, session) == [
            "seed", "echo: seed", "after", "echo: after", "again", "echo: again"
        ]  # fmt: skip
        assert calls(upstream)[2] == ["seed", "echo: seed", "after"]  # B never saw A's turn
