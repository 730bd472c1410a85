"""Turns racing on one session, through two proxy processes sharing Redis (or one disk
store's directory): they run one at a time, each answered turn is stored exactly once,
no accepted message is forked away, nothing is refused after the upstream was paid, and
a 409 comes only for a history that truly conflicts (one lacking a turn that raced it)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from proxy.cli.local import held_port
from tests.proxies import MODEL, proxy_config
from tests.servers import start, stop, wait_ready
from tests.upstream import FakeUpstream, Reply

KEY = "concurrent-turns-key-0123456789"
RACERS = 20


@contextmanager
def two_proxies(config: dict[str, Any], directory: Path) -> Iterator[list[str]]:
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    with ExitStack() as stack:
        urls = []
        for name in ("a", "b"):
            port = stack.enter_context(held_port())
            (directory / name).mkdir()
            args = ["--config", str(path), "--port", str(port)]
            process = start(args, directory / "net.log", directory / name)
            stack.callback(lambda p=process: print(stop(p)))
            urls.append(f"http://127.0.0.1:{port}")
            wait_ready(urls[-1], process)
        yield urls


def client(url: str, session: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=url + "/v1",
        api_key=KEY,
        max_retries=0,  # the SDK would retry a 409 by itself; this test counts them
        default_headers={"x-session-id": session},
        timeout=120,
    )


def turn(url: str, session: str, messages: list[dict[str, str]], append: bool, stream: bool):
    """(status, reply text or error code)."""
    headers = {"x-session-mode": "append"} if append else {}
    try:
        if stream:
            chunks = client(url, session).chat.completions.create(
                model=MODEL, messages=messages, stream=True, extra_headers=headers
            )
            return 200, "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        reply = client(url, session).chat.completions.create(
            model=MODEL, messages=messages, extra_headers=headers
        )
        return 200, reply.choices[0].message.content
    except openai.APIStatusError as exc:
        return exc.status_code, exc.body.get("code") if isinstance(exc.body, dict) else None


@pytest.mark.parametrize("store", ["redis", "disk"])
def test_racing_turns_are_serialized_and_none_is_lost(
    upstream: FakeUpstream, redis_url: str, tmp_path: Path, store: str
) -> None:
    upstream.default = Reply(stall_seconds=0.3)  # each turn takes a while: they overlap
    # Replicas share the tenant secret (as the deploy files have them), so a key is one
    # tenant whichever process it reaches.
    session = {"store": store, "tenant_secret": "shared-secret"}
    session |= {"redis_url": redis_url} if store == "redis" else {"path": str(tmp_path / "store")}
    config = proxy_config(upstream, session=session, auth={"keys": [{"key": KEY}]})
    session = f"race-{uuid.uuid4().hex}"
    with two_proxies(config, tmp_path) as urls:
        assert turn(urls[0], session, [{"role": "user", "content": "seed"}], False, False) == (
            200,
            "echo: seed",
        )
        history = [
            {"role": "user", "content": "seed"},
            {"role": "assistant", "content": "echo: seed"},
        ]
        upstream.requests.clear()
        # Half send only their new message, half the whole history as they know it (the
        # seed turn); some stream; they alternate between the two processes.
        racers = []
        for i in range(RACERS):
            append = i % 2 == 0
            text = f"{'append' if append else 'full'} {i}"
            messages = [{"role": "user", "content": text}]
            racers.append((urls[i % 2], text, messages if append else history + messages, append))
        go = threading.Barrier(RACERS)

        def race(i: int) -> tuple[int, Any]:
            url, _, messages, append = racers[i]
            go.wait()
            return turn(url, session, messages, append, stream=i % 4 < 2)

        with ThreadPoolExecutor(RACERS) as pool:
            results = list(pool.map(race, range(RACERS)))

        answered = {racers[i][1] for i, (status, _) in enumerate(results) if status == 200}
        for (_, text, _, append), (status, reply) in zip(racers, results, strict=True):
            if append:  # nothing to conflict with: every one is served
                assert (status, reply) == (200, f"echo: {text}")
            else:  # served, or refused for lacking turns that raced it
                assert (status, reply) in ((200, f"echo: {text}"), (409, "conflict"))
        assert len(answered) >= RACERS // 2

        stored = httpx.get(
            f"{urls[1]}/v1/sessions/{session}", headers={"authorization": f"Bearer {KEY}"}
        ).json()["messages"]
        contents = [m["content"] for m in stored]
        assert contents[:2] == ["seed", "echo: seed"]  # never forked away
        turns = list(zip(contents[2::2], contents[3::2], strict=True))
        assert sorted(user for user, _ in turns) == sorted(answered)  # each exactly once
        assert all(reply == f"echo: {user}" for user, reply in turns)

        # One at a time: each upstream call saw every turn stored before it, and only the
        # answered turns were paid for.
        calls = upstream.chat_requests()
        assert len(calls) == len(answered)
        for k, call in enumerate(calls):
            sent = [m["content"] for m in call.body["messages"]]
            assert sent == contents[: 2 + 2 * k + 1], k

        # A client whose history is current is served, whichever process it reaches.
        current = [{"role": m["role"], "content": m["content"]} for m in stored]
        follow_up = [*current, {"role": "user", "content": "follow-up"}]
        assert turn(urls[0], session, follow_up, False, False) == (200, "echo: follow-up")
