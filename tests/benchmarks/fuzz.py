"""Fuzz: hostile requests over the three doors, as an attacker sends them (issue 51).

`count` requests (12,000; `--quick` 300), `CONCURRENCY` in flight, to `context-proxy
serve` from the deploy install (`.venv-deploy`, its malloc settings, one worker, the
default settings) in front of `fuzz_upstream`, with three models: an OpenAI-compatible
one (chat completions), a Claude one (Anthropic's Messages API) and a Responses-native
one. What is sent is `fuzz_cases`' (seeded: case N is always the same request): every
repro of the issue, mutated valid bodies, a tenth whose upstream misbehaves, valid
bodies. Meanwhile a prober asks `/health/live` every 50 ms from a thread of its own.

It prints the answers by door and kind; every 5xx the request itself did not cause
(a request whose upstream misbehaved may be answered 502 or 504, or end its stream in
the door's error event) and every dropped connection (a transport error, no answer in
`CLIENT_TIMEOUT`, a stream with neither its end nor its door's error event, a 200 that
is not JSON), grouped, each group with a repro and that case sent again alone with what
the proxy logged for it; any answer with a traceback, a module path or a LiteLLM class
name; the proxy's RSS fresh (after start-up and `WARM_UP` valid requests), after the run
and its peak; and the worst `/health/live` latencies. `--case N ...` sends only those
cases, one at a time, and shows each answer and log whole.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import orjson

from tests.benchmarks import processes
from tests.benchmarks.fuzz_bodies import CHAT, CLAUDE, PATHS, RESPONSES, Case
from tests.benchmarks.fuzz_cases import case, valid_case
from tests.benchmarks.fuzz_report import (
    MEMORY_GUARD,
    PROBE_EVERY,
    SETTLE,
    WARM_UP,
    Alone,
    Outcome,
    Run,
    groups,
    report,
    telling,
)

COUNT, QUICK_COUNT, SEED = 12_000, 300, 51
CONCURRENCY = 8
CLIENT_TIMEOUT = 120.0
PROGRESS = 1000  # answers between two progress lines
CONFIRMED = 40  # groups whose first case is sent again alone
FOUR_XX = {"invalid_request_error", "authentication_error", "permission_error"}
FOUR_XX |= {"not_found_error", "rate_limit_error", "request_too_large"}
LEAK = re.compile(
    rb"Traceback|File \"|\.py\"?, line|site-packages|litellm\.|AnthropicError - |"
    rb"\b[A-Z]\w*Exception\b|\b(?:BadRequest|APIConnection|InternalServer|ServiceUnavailable"
    rb"|ContextWindowExceeded|UnprocessableEntity|APIResponseValidation)Error\b"
)
ENDS = {
    "chat": (b"data: [DONE]",),
    "messages": (b"event: message_stop",),
    "responses": (b"event: response.completed", b"event: response.incomplete"),
}
ERRORS = {
    "chat": (b'data: {"error"',),
    "messages": (b"event: error\n",),
    "responses": (b"event: error\n", b"event: response.failed\n"),
}


def config(upstream_url: str) -> dict[str, Any]:
    """The three models at the fuzz upstream; every other setting the proxy's default."""
    base = {"api_base": upstream_url, "api_key": processes.UPSTREAM_KEY}
    anthropic = base | {"api_base": upstream_url.removesuffix("/v1")}  # LiteLLM adds /v1
    return {
        "model_list": [
            {"model_name": CHAT, "litellm_params": base | {"model": "openai/gpt-4o-mini"}},
            {
                "model_name": CLAUDE,
                "litellm_params": anthropic | {"model": "anthropic/claude-sonnet-4-5"},
            },
            {
                "model_name": RESPONSES,
                "litellm_params": base | {"model": "openai/gpt-4.1"},
                "model_info": {"native_api": True},
            },
        ]
    }


@contextmanager
def serving(directory: Path) -> Iterator[tuple[str, str, subprocess.Popen[bytes], Path]]:
    """The fuzz upstream and the proxy in front of it: the upstream's URL, the proxy's,
    its process and its log."""
    with (
        processes.hostile_upstream() as upstream_url,
        processes.deployed_proxy(config(upstream_url), directory) as (url, process, log),
    ):
        yield upstream_url, url, process, log


# -- one request ---------------------------------------------------------------------------


async def send(http: aiohttp.ClientSession, url: str, sent: Case) -> Outcome:
    """`sent`, and what became of it."""
    headers = {"Content-Type": "application/json", **sent.headers}
    started = time.perf_counter()
    status: int | None = None
    data, kind = b"", ""
    try:
        async with asyncio.timeout(CLIENT_TIMEOUT):
            async with http.post(url + sent.path, data=sent.body, headers=headers) as response:
                status, kind = response.status, response.content_type
                data = await response.read()
        verdict, answer = judge(sent, status, kind, data)
    except TimeoutError:
        verdict, answer = f"dropped: no answer in {CLIENT_TIMEOUT:.0f} s", data[:200]
    except aiohttp.ClientError as exc:
        verdict, answer = f"dropped: {type(exc).__name__}", str(exc)[:200].encode()
    leak = None
    if verdict != "2xx" and not verdict.startswith("dropped"):
        shown = data[:100_000] if verdict in ("4xx", "5xx") else answer
        found = LEAK.search(shown)
        leak = shown[max(0, found.start() - 60) : found.end() + 100] if found else None
    return Outcome(
        sent.index,
        sent.kind,
        sent.path,
        sent.model,
        sent.stream,
        "X-Session-Id" in sent.headers,
        sent.upstream,
        status,
        verdict,
        answer,
        sent.body[:200],
        time.perf_counter() - started,
        leak,
    )


def judge(sent: Case, status: int, kind: str, data: bytes) -> tuple[str, bytes]:
    """The verdict on an answer, and the part of it to show."""
    if status >= 400:
        return ("5xx" if status >= 500 else "4xx"), data[:200]
    if kind == "text/event-stream":
        api = "messages" if sent.door == "count_tokens" else sent.door
        error = next((data.index(m) for m in ERRORS[api] if m in data), None)
        if error is not None:
            event = data[error : error + 600]
            return f"event {_event_class(event)}", event[:200]
        if any(end in data for end in ENDS[api]):
            return "2xx", data[:200]
        return "dropped: a stream with neither its end nor an error event", data[-200:]
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return "dropped: a 200 that is not JSON", data[:200]
    return "2xx", data[:200]


def _event_class(event: bytes) -> str:
    """4xx or 5xx, by the error type an error event names."""
    line = next((line for line in event.split(b"\n") if line.startswith(b"data: ")), b"")
    try:
        data = orjson.loads(line[6:])
    except orjson.JSONDecodeError:
        return "5xx"
    inner = data.get("error") if isinstance(data, dict) else None
    found = inner.get("type") if isinstance(inner, dict) else None
    if found is None and isinstance(data, dict) and isinstance(data.get("response"), dict):
        found = (data["response"].get("error") or {}).get("code")
    return "4xx" if found in FOUR_XX else "5xx"


# -- the prober ----------------------------------------------------------------------------


class Prober(threading.Thread):
    """`/health/live` every `PROBE_EVERY` s and the proxy's RSS, from a thread of its own
    (the client's event loop is busy building and reading bodies)."""

    def __init__(self, url: str, pid: int) -> None:
        super().__init__(daemon=True)
        self.url, self.pid = url, pid
        self.latencies: list[float] = []
        self.failed = 0
        self.peak = 0.0
        self.done = threading.Event()
        self.over = threading.Event()  # the proxy's RSS passed `MEMORY_GUARD`

    def run(self) -> None:
        with httpx.Client(timeout=60) as client:
            while not self.done.is_set():
                started = time.perf_counter()
                try:
                    client.get(self.url + "/health/live")
                except httpx.HTTPError:
                    self.failed += 1
                took = time.perf_counter() - started
                self.latencies.append(took)
                self.peak = max(self.peak, rss(self.pid))
                if self.peak > MEMORY_GUARD:
                    self.over.set()
                self.done.wait(max(0.0, PROBE_EVERY - took))


def rss(pid: int, field: str = "VmRSS") -> float:
    """A process's resident memory (or its peak, `VmHWM`), MiB; 0 once it has ended."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    for line in status.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


# -- the run -------------------------------------------------------------------------------


async def drive(
    url: str, indices: Iterable[int], seed: int, concurrency: int, stop: threading.Event
) -> list[Outcome]:
    """The cases, `concurrency` in flight, until they are all answered or `stop` is set."""
    pending = iter(indices)
    outcomes: list[Outcome] = []

    async def worker() -> None:
        # A connection of its own for every request: a kept-alive one the server closed
        # while idle would read as a drop.
        connector = aiohttp.TCPConnector(force_close=True, limit=0)
        async with aiohttp.ClientSession(connector=connector) as http:
            for index in pending:
                if stop.is_set():
                    return
                outcomes.append(await send(http, url, case(seed, index)))
                if len(outcomes) % PROGRESS == 0:  # on stderr: the report is stdout's
                    found = sum(o.finding() is not None for o in outcomes)
                    print(f"fuzz: {len(outcomes):,} answered, {found} findings", file=sys.stderr)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return sorted(outcomes, key=lambda o: o.index)


async def run(directory: Path, count: int, seed: int, concurrency: int = CONCURRENCY) -> Run:
    with serving(directory) as (upstream_url, url, process, log):
        warm = [valid_case(seed, n, list(PATHS)[n % 4]) for n in range(WARM_UP)]
        warmed: Counter[str] = Counter()
        async with aiohttp.ClientSession() as http:
            for sent in warm:
                warmed[(await send(http, url, sent)).verdict] += 1
        await asyncio.sleep(1.0)
        fresh = rss(process.pid)
        prober = Prober(url, process.pid)
        prober.start()
        began = time.monotonic()
        outcomes = await drive(url, range(count), seed, concurrency, prober.over)
        seconds = time.monotonic() - began
        prober.done.set()
        prober.join()
        after = rss(process.pid)
        await asyncio.sleep(SETTLE)
        settled, peak = rss(process.pid), rss(process.pid, "VmHWM")
        upstream = httpx.get(upstream_url.removesuffix("/v1") + "/fuzz/stats").json()
        ended = process.poll()
        confirmed = await confirm(url, process.pid, log, seed, outcomes) if ended is None else {}
        text = log.read_text(errors="replace")
    return Run(
        outcomes,
        seconds,
        fresh,
        after,
        settled,
        peak,
        prober.latencies,
        prober.failed,
        upstream,
        text,
        confirmed,
        warmed,
        prober.over.is_set(),
        ended,
    )


async def alone(url: str, pid: int, log: Path, sent: Case) -> Alone:
    """`sent` with nothing else in flight: its outcome, what the proxy logged meanwhile,
    and the longest `/health/live` took meanwhile (whether it holds the loop itself)."""
    offset = log.stat().st_size
    prober = Prober(url, pid)
    prober.start()
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as http:
        outcome = await send(http, url, sent)
    await asyncio.sleep(0.5)
    prober.done.set()
    await asyncio.to_thread(prober.join)
    with log.open("rb") as file:
        file.seek(offset)
        logged = file.read().decode(errors="replace")
    return Alone(outcome, telling(logged), max(prober.latencies, default=0.0))


async def confirm(
    url: str, pid: int, log: Path, seed: int, outcomes: list[Outcome]
) -> dict[int, Alone]:
    """The first case of each of the largest `CONFIRMED` groups of findings, sent again
    alone."""
    confirmed = {}
    for members in sorted(groups(outcomes).values(), key=len, reverse=True)[:CONFIRMED]:
        first = members[0]
        confirmed[first.index] = await alone(url, pid, log, case(seed, first.index))
    return confirmed


async def cases(directory: Path, indices: list[int], seed: int) -> str:
    """`--case`: each case alone, its request, answer and log shown whole."""
    lines = []
    with serving(directory) as (_, url, process, log):
        for index in indices:
            sent = case(seed, index)
            again = await alone(url, process.pid, log, sent)
            outcome = again.outcome
            lines += [
                f"case {index}: {sent.kind}, POST {sent.path} {sent.headers}",
                f"  request ({len(sent.body):,} bytes): {sent.body[:2000]!r}",
                f"  -> {outcome.verdict} ({outcome.status}) in {outcome.seconds:.2f} s"
                f" (/health/live at most {again.health * 1000:.0f} ms): {outcome.answer!r}",
                *(f"  log: {line}" for line in again.logged),
            ]
    return "\n".join(lines)


async def benchmark(
    directory: Path, count: int = COUNT, seed: int = SEED, concurrency: int = CONCURRENCY
) -> str:
    result = await run(directory, count, seed, concurrency)
    return report(result, count, seed, concurrency)
