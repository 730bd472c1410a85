"""One request cannot stall the others: while a 5 MB message is counted and cut to the
budget, on every door and with or without a session, and while the disk store commits
megabytes (a 5 MB message, the sessions beside it, a turn of 20,000 messages), the proxy
still answers `/health/live` within 100 ms. The proxy runs as `context-proxy serve`
does, a process of its own, and so does the prober (no lock of the test's own process
can slow it)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from proxy.cli.local import held_port
from tests.integration.test_messages import CLAUDE, claude_config
from tests.integration.test_native_responses import NATIVE, native_config
from tests.proxies import MODEL, UPSTREAM_KEY
from tests.servers import proxy_command, stop, wait_ready
from tests.upstream import FakeUpstream

LIMIT_MS = 100
PROSE = "lorem ipsum dolor sit amet " * 190_000  # 5.1 MB, the body, larger
UNSPACED = "x" * 5_000_000  # one "word": quadratic for a BPE tokenizer counted whole
ROOMY = "roomy"  # a window that takes the 5 MB message whole: nothing cut, nothing folded

# Asks for /health/live every 20 ms until its stdin closes; prints each answer's ms.
PROBER = """
import sys, threading, time, httpx
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
times = []
with httpx.Client(timeout=30) as client:
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


@pytest.fixture(scope="module")
def proxy(
    _shared_upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
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
            yield url
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


class Prober:
    """The prober's process: it asks from when it is made until `times` (each answer's
    ms, in order)."""

    def __init__(self, url: str) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", PROBER, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def times(self) -> list[float]:
        output, _ = self._process.communicate("", timeout=60)
        return list(json.loads(output))


@pytest.mark.parametrize("session", [None, "fair"], ids=["no session", "a session"])
@pytest.mark.parametrize("case", list(CASES))
def test_health_answers_while_a_5mb_body_is_fitted(
    proxy: str, upstream: FakeUpstream, case: str, session: str | None
) -> None:
    path, template = CASES[case]
    headers = {"authorization": "Bearer client-key"}
    if session:
        headers["x-session-id"] = f"{session}-{path}-{template['model']}"
    prober = Prober(proxy)
    before = len(upstream.requests)
    answers: list[httpx.Response] = []
    sender = threading.Thread(
        target=lambda: answers.append(
            httpx.post(proxy + path, json=body(template), headers=headers, timeout=120)
        )
    )
    sender.start()
    sender.join()
    times = prober.times()
    [answer] = answers
    assert answer.status_code == 200, answer.text
    sent = [len(json.dumps(r.body)) for r in upstream.requests[before:]]
    assert sent and max(sent) < 2_000_000, "the message was cut to the model's budget"
    assert len(times) >= 10, times  # the body took a while: probed all along
    assert max(times) <= LIMIT_MS, sorted(times)[-5:]


def test_health_answers_while_the_store_commits_megabytes(proxy: str) -> None:
    """The disk store commits a turn of megabytes off the event loop; a turn beside a
    stored 5 MB message costs what any other does (no row of its reads that message: 2,000
    rows took the store past its 4 s deadline, a 503, when each did); a turn of 20,000
    messages goes in a few hundred rows a statement: all stored whole. On a model whose
    window takes them whole, so that what is timed is the store's part, not a summary."""
    headers = {"authorization": "Bearer client-key"}

    def turn(session: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        answer = httpx.post(
            proxy + "/v1/chat/completions",
            json={"model": ROOMY, "messages": messages},
            headers={**headers, "x-session-id": session},
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
        return dict(answer.json()["choices"][0]["message"])

    prober = Prober(proxy)
    first = [{"role": "user", "content": PROSE}]
    reply = turn("store-5mb", first)
    turn("store-5mb", [*first, reply, {"role": "user", "content": "and then?"}])
    # Rows whose keys come just before the 5 MB one's, and just after its session's.
    turn("store-5ma", [{"role": "user", "content": f"hello {i}"} for i in range(2_000)])
    turn("store-5mb0", [{"role": "user", "content": "hello"}])
    many = [{"role": "user", "content": f"weather in city {i}?"} for i in range(20_000)]
    turn("store-many", many)
    times = prober.times()
    assert len(times) >= 10, times
    assert max(times) <= LIMIT_MS, sorted(times)[-5:]

    def stored(session: str) -> list[dict[str, Any]]:
        found = httpx.get(f"{proxy}/v1/sessions/{session}", headers=headers, timeout=60)
        assert found.status_code == 200, found.text
        return list(found.json()["messages"])

    kept = stored("store-5mb")
    assert len(kept) == 4 and kept[0]["content"] == PROSE
    assert [m["content"] for m in stored("store-many")[:20_000]] == [m["content"] for m in many]
