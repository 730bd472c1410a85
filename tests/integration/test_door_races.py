"""Turns racing on one session through the Messages and Responses doors, across two proxy
processes sharing Redis: they run one at a time, each answered turn is stored exactly
once, and a turn refused (409) is one whose history truly lacks a turn that raced it.
The chat door's own race is in test_concurrent_turns."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai

from tests.integration.test_concurrent_turns import two_proxies
from tests.proxies import MODEL, proxy_config
from tests.upstream import FakeUpstream, Reply

KEY = "door-races-key-0123456789"
RACERS = 12


def race(racers: list[Callable[[], tuple[int, str | None]]]) -> list[tuple[int, str | None]]:
    go = threading.Barrier(len(racers))

    def run(racer: Callable[[], tuple[int, str | None]]) -> tuple[int, str | None]:
        go.wait()
        return racer()

    with ThreadPoolExecutor(len(racers)) as pool:
        return list(pool.map(run, racers))


def stored(url: str, session: str) -> list[str]:
    response = httpx.get(f"{url}/v1/sessions/{session}", headers={"authorization": f"Bearer {KEY}"})
    return [m["content"] for m in response.json()["messages"]]


def serialized(upstream: FakeUpstream, contents: list[str], answered: int) -> None:
    """Only the answered turns were paid for, and each upstream call saw every turn
    stored before it."""
    calls = upstream.chat_requests()
    assert len(calls) == answered
    for k, call in enumerate(calls):
        sent = [m["content"] for m in call.body["messages"]]
        assert sent == contents[: 2 + 2 * k + 1], k


def racing_config(upstream: FakeUpstream, redis_url: str) -> dict[str, Any]:
    upstream.default = Reply(stall_seconds=0.3)  # each turn takes a while: they overlap
    session = {"store": "redis", "redis_url": redis_url, "tenant_secret": "shared-secret"}
    return proxy_config(upstream, session=session, auth={"keys": [{"key": KEY}]})


def test_claude_code_turns_racing_through_the_messages_door(
    upstream: FakeUpstream, redis_url: str, tmp_path: Path
) -> None:
    """Each resends the whole history, naming its session in `metadata.user_id` as
    Claude Code does; some stream."""
    session = f"race-{uuid.uuid4().hex}"
    with two_proxies(racing_config(upstream, redis_url), tmp_path) as urls:

        def turn(url: str, history: list[dict[str, Any]], stream: bool) -> tuple[int, str | None]:
            client = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0, timeout=120)
            arguments: dict[str, Any] = {
                "model": MODEL,
                "max_tokens": 50,
                "messages": history,
                "metadata": {"user_id": session},
            }
            try:
                if stream:
                    with client.messages.stream(**arguments) as events:
                        return 200, events.get_final_text()
                reply = client.messages.create(**arguments)
                return 200, reply.content[0].text  # type: ignore[union-attr]
            except anthropic.APIStatusError as exc:
                return exc.status_code, exc.body["error"]["type"]  # type: ignore[index]

        seed = [{"role": "user", "content": "seed"}]
        assert turn(urls[0], seed, False) == (200, "echo: seed")
        history = [*seed, {"role": "assistant", "content": "echo: seed"}]
        upstream.requests.clear()
        texts = [f"claude {i}" for i in range(RACERS)]
        results = race(
            [
                lambda i=i: turn(
                    urls[i % 2], [*history, {"role": "user", "content": texts[i]}], i % 3 == 0
                )
                for i in range(RACERS)
            ]
        )

        answered = [text for text, (status, _) in zip(texts, results, strict=True) if status == 200]
        for text, result in zip(texts, results, strict=True):
            assert result in ((200, f"echo: {text}"), (409, "invalid_request_error")), result
        assert answered
        contents = stored(urls[1], session)
        assert contents[:2] == ["seed", "echo: seed"]  # never forked away
        turns = list(zip(contents[2::2], contents[3::2], strict=True))
        assert sorted(user for user, _ in turns) == sorted(answered)  # each exactly once
        assert all(reply == f"echo: {user}" for user, reply in turns)
        serialized(upstream, contents, len(answered))


def test_responses_racing_on_one_conversation(
    upstream: FakeUpstream, redis_url: str, tmp_path: Path
) -> None:
    """Half continue the same `previous_response_id` (at most one of them can: a response
    is continued once), half send only their new input under the conversation's
    `prompt_cache_key`, as Codex does (every one of those is served)."""
    with two_proxies(racing_config(upstream, redis_url), tmp_path) as urls:
        clients = [
            openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=120)
            for url in urls
        ]
        first = clients[0].responses.create(model=MODEL, input="seed")
        listed = httpx.get(f"{urls[0]}/v1/sessions", headers={"authorization": f"Bearer {KEY}"})
        (session,) = [s["id"] for s in listed.json()["data"] if s["id"].startswith("resp-")]

        def turn(i: int) -> tuple[int, str | None]:
            client = clients[i % 2]
            chained = i % 2 == 0
            extra: dict[str, Any] = (
                {"previous_response_id": first.id} if chained else {"prompt_cache_key": session}
            )
            try:
                if i % 3 == 0:
                    with client.responses.stream(model=MODEL, input=f"r {i}", **extra) as events:
                        return 200, events.get_final_response().output_text
                return 200, client.responses.create(
                    model=MODEL, input=f"r {i}", **extra
                ).output_text
            except openai.APIStatusError as exc:
                return exc.status_code, exc.code

        upstream.requests.clear()
        results = race([lambda i=i: turn(i) for i in range(RACERS)])

        chained = [results[i] for i in range(0, RACERS, 2)]
        keyed = [results[i] for i in range(1, RACERS, 2)]
        assert keyed == [(200, f"echo: r {i}") for i in range(1, RACERS, 2)]
        assert sum(status == 200 for status, _ in chained) <= 1
        for i in range(0, RACERS, 2):
            assert results[i] in ((200, f"echo: r {i}"), (409, "conflict")), results[i]
        answered = [f"r {i}" for i, (status, _) in enumerate(results) if status == 200]
        contents = stored(urls[1], session)
        assert contents[:2] == ["seed", "echo: seed"]
        turns = list(zip(contents[2::2], contents[3::2], strict=True))
        assert sorted(user for user, _ in turns) == sorted(answered)  # each exactly once
        assert all(reply == f"echo: {user}" for user, reply in turns)
        serialized(upstream, contents, len(answered))
