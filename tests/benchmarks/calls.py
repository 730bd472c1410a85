"""How straight a turn's path through the proxy is: the calls from one of the proxy's
modules into another during one request, the modules it touches, and the distinct
engine-to-engine edges (`proxy.engine.*` calling another `proxy.engine.*` module).

Two turns through the real app (`create_app`, on loopback, in front of the test
upstream): a plain chat turn appended to a short session (a 128k-token model, nothing to
fold), and a summarising one, the first request of a session of 40 long exchanges to a
4,096-token model, which folds them in line (the summarizer calls are printed beside).
Every Python call event in the proxy's threads (the event loop's and its workers',
a coroutine resumed counted again) whose code and whose caller's code are in two
different `proxy` modules counts once; the client's thread is not profiled. Counts, not
times: they repeat from run to run (a body read in one piece or two may add a call).
"""

from __future__ import annotations

import random
import tempfile
import threading
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import yaml

from proxy.config.settings import load_settings
from proxy.http.app import create_app
from tests.benchmarks.scorecard import respond
from tests.benchmarks.settling import settled
from tests.servers import serve
from tests.summarizing import asks_summary
from tests.upstream import FakeUpstream, Reply, running_upstream

__all__ = ["benchmark"]

_PROSE = (
    "the deploy pipeline database migration invoice customer payment schedule cache "
    "server config release branch ticket review budget latency queue worker token api "
    "report meeting owner vendor contract region cluster backup alert metric dashboard "
    "we should check whether this also affects next week plan and then decide on it"
)
WORDS = _PROSE.split()
Message = dict[str, Any]


class Calls:
    """A profile function counting calls between two `proxy` modules while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.edges: Counter[tuple[str, str]] = Counter()

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if not self.on or event != "call" or frame.f_back is None:
            return
        callee = frame.f_globals.get("__name__", "")
        caller = frame.f_back.f_globals.get("__name__", "")
        if caller != callee and _ours(caller) and _ours(callee):
            self.edges[(caller, callee)] += 1

    def line(self, name: str, summaries: int) -> str:
        modules = {module for edge in self.edges for module in edge}
        engine = [e for e in self.edges if all(m.startswith("proxy.engine") for m in e)]
        total = sum(self.edges.values())
        return f"{name:<18} {total:>6,} {len(modules):>8} {len(engine):>13} {summaries:>11}"


def _ours(module: str) -> bool:
    return module == "proxy" or module.startswith("proxy.")


def _text(rng: random.Random, low: int, high: int) -> str:
    """Words, a fifth of them carrying a number or an identifier (as logs and code do)."""
    words = []
    for _ in range(rng.randint(low, high)):
        word = rng.choice(WORDS)
        if rng.random() < 0.2:
            word = f"{word}-{rng.randint(100, 99999)}"
        words.append(word)
    return " ".join(words) + "."


def _summaries(upstream: FakeUpstream) -> int:
    return sum(asks_summary(r.body) for r in upstream.requests)


def _turn(directory: Path, calls: Calls, window: int, said: list[Message], asks: list[str]) -> int:
    """A session that begins with `said` and goes on with `asks`, each sent with the whole
    conversation before it and only the last one profiled; the summarizer calls it made."""
    with running_upstream() as upstream:
        upstream.default = Reply(respond=respond)
        config = {
            "model_list": [
                {
                    "model_name": "calls",
                    "litellm_params": {
                        "model": "openai/gpt-4o-mini",
                        "api_base": upstream.base_url,
                        "api_key": "sk-calls",
                    },
                    "model_info": {"max_input_tokens": window},
                }
            ],
            "session": {"path": tempfile.mkdtemp(dir=directory, prefix="calls-")},
        }
        path = directory / "calls.yaml"
        path.write_text(yaml.safe_dump(config))
        with (
            serve(create_app(load_settings(path, environ={}))) as url,
            httpx.Client(base_url=url, timeout=600) as client,
        ):
            history, before = list(said), 0
            for number, text in enumerate(asks):
                history.append({"role": "user", "content": text})
                before = _summaries(upstream)
                with settled():
                    calls.on = number == len(asks) - 1
                    answer = client.post(
                        "/v1/chat/completions",
                        json={"model": "calls", "messages": history},
                        headers={"X-Session-Id": "calls"},
                    )
                    calls.on = False
                answer.raise_for_status()
                reply = answer.json()["choices"][0]["message"]
                history.append({"role": "assistant", "content": reply["content"]})
            return _summaries(upstream) - before


def benchmark(directory: Path) -> str:
    rng = random.Random(7)
    plain, summarising = Calls(), Calls()
    threading.setprofile(plain)  # the servers' threads start after this
    asks = [_text(rng, 20, 40) for _ in range(4)]
    rows = [plain.line("plain turn", _turn(directory, plain, 128_000, [], asks))]
    threading.setprofile(summarising)
    said = [
        {"role": role, "content": _text(rng, 100, 200)}
        for _ in range(40)
        for role in ("user", "assistant")
    ]
    summaries = _turn(directory, summarising, 4_096, said, [_text(rng, 20, 40)])
    rows.append(summarising.line("summarising turn", summaries))
    threading.setprofile(None)
    head = f"{'turn':<18} {'calls':>6} {'modules':>8} {'engine edges':>13} {'summarizer':>11}"
    return "\n".join([head, *rows])
