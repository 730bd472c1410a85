"""One request cannot stall the others: while a 5 MB message is counted and cut to the
budget, on every door and with or without a session, and while the disk store commits
megabytes (a 5 MB message, the sessions beside it, a turn of 20,000 messages), the proxy
still answers `/health/live` within 100 ms. The proxy runs as `context-proxy serve`
does, a process of its own, and so does the prober (no lock of the test's own process
can slow it).

A provider's reply of the wrong shape fails only its own request: a 502 (or, once a
stream has begun, the door's error event) in the door's shape, said in the proxy's
words, on every door and every route, logged in one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from proxy.cli.local import held_port
from tests.integration.test_messages import CLAUDE, claude_config
from tests.integration.test_native_responses import NATIVE, native_config
from tests.proxies import MODEL, UPSTREAM_KEY
from tests.servers import proxy_command, stop, wait_ready
from tests.upstream import FakeUpstream, Reply

LIMIT_MS = 100
PROSE = "lorem ipsum dolor sit amet " * 190_000  # 5.1 MB, the body, larger
UNSPACED = "x" * 5_000_000  # one "word": quadratic for a BPE tokenizer counted whole
ROOMY = "roomy"  # a window that takes the 5 MB message whole: nothing cut, nothing folded

# Says "ready" once it is answered, then asks for /health/live every 20 ms until its
# stdin closes; prints each answer's ms.
PROBER = """
import sys, threading, time, httpx
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
times = []
with httpx.Client(timeout=30) as client:
    client.get(sys.argv[1] + "/health/live")
    print("ready", flush=True)
    while not done.is_set():
        began = time.perf_counter()
        assert client.get(sys.argv[1] + "/health/live").status_code == 200
        times.append((time.perf_counter() - began) * 1000)
        time.sleep(0.02)
print(times)
"""

CASES = {
    "chat, Claude": ("/v1/chat/completions", {"model": CLAUDE, "messages": "PROSE"}),
    "chat, a GPT": ("/v1/chat/completions", {"model": MODEL, "messages": "UNSPACED"}),
    "messages": ("/v1/messages", {"model": CLAUDE, "max_tokens": 20, "messages": "PROSE"}),
    "responses, native": ("/v1/responses", {"model": NATIVE, "input": "UNSPACED"}),
    "responses, Claude": ("/v1/responses", {"model": CLAUDE, "input": "PROSE"}),
}


@dataclass(frozen=True)
class Served:
    url: str
    log: Path  # what the proxy process writes


@pytest.fixture(scope="module")
def proxy(
    _shared_upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("fairness")
    config = claude_config(_shared_upstream)
    config["model_list"] += native_config(_shared_upstream)["model_list"][1:2]
    config["model_list"].append(
        {
            "model_name": ROOMY,
            "litellm_params": {
                "model": f"openai/{ROOMY}",
                "api_base": _shared_upstream.base_url,
                "api_key": UPSTREAM_KEY,
            },
            "model_info": {"max_input_tokens": 4_000_000, "max_output_tokens": 512},
        }
    )
    config["session"] = {"path": str(directory / "sessions")}
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    with held_port() as port, (directory / "proxy.log").open("w") as log:
        process = subprocess.Popen(
            [*proxy_command("serve", "--config", str(path)), "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, process)
            yield Served(url, directory / "proxy.log")
        finally:
            stop(process)


def body(template: dict[str, Any]) -> dict[str, Any]:
    text = {"PROSE": PROSE, "UNSPACED": UNSPACED}
    out = dict(template)
    if "messages" in out:
        out["messages"] = [{"role": "user", "content": text[out["messages"]]}]
    else:
        out["input"] = text[out["input"]]
    return out


def probed(url: str, send: Callable[[], httpx.Response]) -> tuple[httpx.Response, list[float]]:
    """`send()`'s answer, and how long each `/health/live` took meanwhile (ms), asked by
    a process of its own."""
    prober = subprocess.Popen(
        [sys.executable, "-c", PROBER, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert prober.stdout is not None and prober.stdout.readline() == "ready\n"
        answer = send()
    finally:
        output, _ = prober.communicate("", timeout=60)
    return answer, json.loads(output)


@pytest.mark.parametrize("session", [None, "fair"], ids=["no session", "a session"])
@pytest.mark.parametrize("case", list(CASES))
def test_health_answers_while_a_5mb_body_is_fitted(
    proxy: Served, upstream: FakeUpstream, case: str, session: str | None
) -> None:
    path, template = CASES[case]
    headers = {"authorization": "Bearer client-key"}
    if session:
        headers["x-session-id"] = f"{session}-{path}-{template['model']}"
    before = len(upstream.requests)
    answer, times = probed(
        proxy.url,
        lambda: httpx.post(proxy.url + path, json=body(template), headers=headers, timeout=120),
    )
    assert answer.status_code == 200, answer.text
    sent = [len(json.dumps(r.body)) for r in upstream.requests[before:]]
    assert sent and max(sent) < 2_000_000, "the message was cut to the model's budget"
    assert len(times) >= 10, times  # the body took a while: probed all along
    assert max(times) <= LIMIT_MS, sorted(times)[-5:]


def test_health_answers_while_the_store_commits_megabytes(proxy: Served) -> None:
    """The disk store commits a turn of megabytes off the event loop; a turn beside a
    stored 5 MB message costs what any other does (no row of its reads that message: 2,000
    rows took the store past its 4 s deadline, a 503, when each did); a turn of 20,000
    messages goes in a few hundred rows a statement: all stored whole. On a model whose
    window takes them whole, so that what is timed is the store's part, not a summary."""
    headers = {"authorization": "Bearer client-key"}

    def turn(session: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        answer = httpx.post(
            proxy.url + "/v1/chat/completions",
            json={"model": ROOMY, "messages": messages},
            headers={**headers, "x-session-id": session},
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
        return dict(answer.json()["choices"][0]["message"])

    first = [{"role": "user", "content": PROSE}]
    many = [{"role": "user", "content": f"weather in city {i}?"} for i in range(20_000)]

    def turns() -> httpx.Response:
        reply = turn("store-5mb", first)
        turn("store-5mb", [*first, reply, {"role": "user", "content": "and then?"}])
        # Rows whose keys come just before the 5 MB one's, and just after its session's.
        turn("store-5ma", [{"role": "user", "content": f"hello {i}"} for i in range(2_000)])
        turn("store-5mb0", [{"role": "user", "content": "hello"}])
        turn("store-many", many)
        return httpx.get(proxy.url + "/health/live")

    _, times = probed(proxy.url, turns)
    assert len(times) >= 10, times
    assert max(times) <= LIMIT_MS, sorted(times)[-5:]

    def stored(session: str) -> list[dict[str, Any]]:
        found = httpx.get(f"{proxy.url}/v1/sessions/{session}", headers=headers, timeout=60)
        assert found.status_code == 200, found.text
        return list(found.json()["messages"])

    kept = stored("store-5mb")
    assert len(kept) == 4 and kept[0]["content"] == PROSE
    assert [m["content"] for m in stored("store-many")[:20_000]] == [m["content"] for m in many]


# More tools than a door checks on the event loop (`proxy.concurrency.MANY_ITEMS`), and as many
# system blocks: checked, translated and counted off it (Claude's tokenizer took seconds).
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "description": "a city"}}}
TOOLS = 1_500


def tooled(door: str, tag: str) -> dict[str, Any]:
    """A request to CLAUDE through `door` with `TOOLS` tools (and system blocks), named
    after `tag` (counted afresh: a process keeps the counts of tools it has seen)."""
    names = [f"{tag}_{n}" for n in range(TOOLS)]
    if door == "chat":
        tools: list[Any] = [
            {"type": "function", "function": {"name": name, "parameters": SCHEMA}} for name in names
        ]
        return {"messages": [{"role": "user", "content": "hi"}], "tools": tools}
    if door == "responses":
        tools = [{"type": "function", "name": name, "parameters": SCHEMA} for name in names]
        return {"input": "hi", "tools": tools}
    tools = [{"name": name, "input_schema": SCHEMA} for name in names]
    system = [{"type": "text", "text": f"Rule {n} of {tag}: be terse."} for n in range(TOOLS)]
    return DOORS["messages"][1] | {"tools": tools, "system": system}


@pytest.mark.parametrize("session", [None, "tools"], ids=["no session", "a session"])
@pytest.mark.parametrize("door", ["chat", "messages", "responses"])
def test_health_answers_while_thousands_of_tools_are_checked_and_counted(
    proxy: Served, upstream: FakeUpstream, door: str, session: str | None
) -> None:
    path = DOORS[door][0]
    headers = {"authorization": "Bearer client-key"}
    if session:
        headers["x-session-id"] = f"{session}-{door}"
    answer, times = probed(
        proxy.url,
        lambda: httpx.post(
            proxy.url + path,
            json=tooled(door, f"{door}_{session}") | {"model": CLAUDE},
            headers=headers,
            timeout=120,
        ),
    )
    assert answer.status_code == 200, answer.text[:500]
    assert len(upstream.requests[-1].body["tools"]) == TOOLS
    assert len(times) >= 5, times  # the request took a while: probed all along
    assert max(times) <= LIMIT_MS, sorted(times)[-5:]


# A reply of 6.5 MB in 100 events of 64 KB, as fast as the provider can send it: its
# bytes are always there already, so the relay never waits for them. Each event its
# own "word" (no space in it), numbered: LiteLLM fails a stream that repeats a chunk.
# (A Responses stream repeats the whole text in four events of its end: each is one
# C pass after another over 6.5 MB, which no turn-taking splits.)
WORDS = [f"w{n:03}-" + "lorem-ipsum-dolor-sit-amet-" * 2427 for n in range(100)]
LONG_REPLY = " ".join(WORDS)
STREAMED = {
    "chat, a GPT": ("chat", MODEL),
    "chat, Claude": ("chat", CLAUDE),
    "messages, Claude": ("messages", CLAUDE),
    "messages, a GPT": ("messages", MODEL),
    "responses, native": ("responses", NATIVE),
    "responses, Claude": ("responses", CLAUDE),
}


@pytest.mark.parametrize("case", list(STREAMED))
def test_health_answers_while_a_long_stream_is_relayed(
    proxy: Served, upstream: FakeUpstream, case: str
) -> None:
    """Each door relaying a long stream, on each route it takes (the lean path, LiteLLM's
    translation, the door's own API): read, framed and written, it gives the event
    loop back to the others every few ms, its end (Responses' repeats the whole reply
    four times) included."""
    door, model = STREAMED[case]
    path, template = DOORS[door]
    upstream.default = Reply(content=LONG_REPLY)
    answer, times = probed(
        proxy.url,
        lambda: httpx.post(
            proxy.url + path,
            json=template | {"model": model, "stream": True},
            headers={"authorization": "Bearer client-key"},
            timeout=120,
        ),
    )
    assert answer.status_code == 200, answer.text[:500]
    assert STREAM_ENDS[door] in answer.text and STREAM_ERRORS[door] not in answer.text
    assert all(word[:40] in answer.text for word in WORDS), "the whole reply was relayed"
    assert len(times) >= 5, times  # the stream took a while: probed all along
    assert max(times) <= LIMIT_MS, sorted(times)[-5:]


# What a provider's 200 may be instead of a reply (the fuzz benchmark's), and each
# door's request, its error in a stream, and its stream's own end.
SHAPES = (b"[]", b"null", b'{"choices": 5}', b'{"content": "x"}', b'{"output": [{}]}')
DOORS = {
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    "messages": (
        "/v1/messages",
        {"max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "responses": ("/v1/responses", {"input": "hi"}),
}
STREAM_ERRORS = {"chat": 'data: {"error"', "messages": "event: error", "responses": "event: error"}
STREAM_ENDS = {"chat": "[DONE]", "messages": "message_stop", "responses": "response.completed"}
INSIDES = re.compile(r"Traceback|\.py\b|litellm|\w+(?:Error|Exception)\b", re.IGNORECASE)


def said(door: str, body: dict[str, Any]) -> str:
    """The message of an error in `door`'s own shape (Anthropic's on the Messages API)."""
    error = body["error"]
    if door == "messages":
        assert body["type"] == "error" and error["type"] == "api_error", body
    else:
        assert error["type"] == "upstream_error", body
    return str(error["message"])


def event_said(door: str, text: str) -> str:
    """The message of the door's error event that ends a stream, which has no end."""
    assert STREAM_ENDS[door] not in text, text[-500:]
    start = text.index(STREAM_ERRORS[door])
    data = text[start:].split("data: ", 1)[1].split("\n", 1)[0]
    return said(door, json.loads(data))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("model", [MODEL, CLAUDE, NATIVE], ids=["lean", "claude", "native"])
@pytest.mark.parametrize("door", list(DOORS))
def test_a_reply_of_the_wrong_shape_fails_its_request_alone(
    proxy: Served, upstream: FakeUpstream, door: str, model: str, stream: bool
) -> None:
    """Each shape, on each route a door takes to the model (the lean path, LiteLLM's
    translation, the door's own API): a 502 in the door's shape, or the door's error
    event once the stream began, saying the provider's reply or stream was not one;
    nothing of the proxy's insides said, no traceback logged, one line logged at most."""
    path, template = DOORS[door]
    for shape in SHAPES:
        raw = b"data: " + shape + b"\n\ndata: [DONE]\n\n" if stream else shape
        kind = {"content-type": "text/event-stream"} if stream else {}
        upstream.default = Reply(raw=raw, headers=kind)
        before = proxy.log.stat().st_size
        answer = httpx.post(
            proxy.url + path,
            json=template | {"model": model, "stream": stream},
            headers={"authorization": "Bearer client-key"},
            timeout=60,
        )
        if answer.status_code == 200 and stream:
            message = event_said(door, answer.text)
        else:
            assert answer.status_code == 502, (shape, answer.text)
            message = said(door, answer.json())
        assert re.search(r"provider('s| sent).*(reply|stream|event)", message), (shape, message)
        assert not INSIDES.search(message), (shape, message)
        with proxy.log.open() as log:
            log.seek(before)
            logged = [line for line in log.read().splitlines() if " INFO " not in line]
        assert not any("Traceback" in line for line in logged), (shape, logged)
        ours = [line for line in logged if " LiteLLM" not in line]  # its one-line notes aside
        assert len(ours) <= 1, (shape, logged)
