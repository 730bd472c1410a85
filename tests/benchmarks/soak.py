"""Soak: does the proxy hold steady under long mixed load? (not part of CI's timing)

For `seconds` (10 minutes by default), `concurrency` clients send turns to thousands
of sessions through `context-proxy serve` (one worker, the disk store, a model window
small enough that long sessions are summarized): plain and streamed, some that the
upstream fails (500), stalls or cuts mid-stream, and some the client abandons before
the answer. It samples the proxy's resident memory and open file descriptors as it
goes, and prints them with the requests served and the outcomes by kind.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson

from tests.benchmarks import processes
from tests.benchmarks.conversations import MODEL
from tests.benchmarks.load import client

SESSIONS = 3000
CONCURRENCY = 32
WINDOW = 4096  # tokens: a session of a dozen turns is summarized, so its working set levels off
# The mix: (share, what the client asks for).
MIX = (
    (0.45, "plain"),
    (0.35, "stream"),
    (0.05, "fail"),  # the upstream answers 500
    (0.05, "cut"),  # the upstream cuts the stream after two chunks
    (0.10, "leave"),  # a slow answer the client does not wait for
)
_WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
]


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    samples: list[tuple[float, int, float, int]] = field(default_factory=list)

    @property
    def served(self) -> int:
        return sum(self.outcomes.values())


def resources(pid: int) -> tuple[float, int]:
    """(resident MB, open file descriptors) of a process."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
    return rss_kb / 1024, len(os.listdir(f"/proc/{pid}/fd"))


async def one_turn(http: aiohttp.ClientSession, url: str, rng: random.Random) -> str:
    kind = rng.choices([k for _, k in MIX], [w for w, _ in MIX])[0]
    text = " ".join(rng.choices(_WORDS, k=rng.randint(20, 300)))
    marker = {"fail": " [fail]", "cut": " [cut]", "leave": " [slow]"}.get(kind, "")
    stream = kind in ("stream", "cut") or (kind == "leave" and rng.random() < 0.5)
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": text + marker}],
        "stream": stream,
    }
    headers = {
        "x-session-id": f"soak-{rng.randrange(SESSIONS)}",
        "x-session-mode": "append",
        "content-type": "application/json",
    }
    request = http.post(url + "/v1/chat/completions", data=orjson.dumps(body), headers=headers)
    if kind == "leave":
        try:
            async with asyncio.timeout(rng.uniform(0.05, 0.5)):
                async with request as response:
                    await response.read()
        except TimeoutError:
            return "client left"
        return "client left too late"
    async with request as response:
        data = await response.read()
    if response.status != 200:
        return f"{response.status} {kind}"
    if stream:
        complete = data.rstrip().endswith(b"data: [DONE]")
        return f"200 {kind}" if complete else f"stream error event ({kind})"
    return f"200 {kind}"


async def drive(url: str, pid: int, seconds: float, concurrency: int) -> Tally:
    tally = Tally()
    deadline = time.monotonic() + seconds
    began = time.monotonic()

    async def worker(index: int) -> None:
        rng = random.Random(index)
        async with client() as http:
            while time.monotonic() < deadline:
                try:
                    tally.outcomes[await one_turn(http, url, rng)] += 1
                except aiohttp.ClientError as exc:
                    tally.outcomes[f"client error {type(exc).__name__}"] += 1

    async def sample() -> None:
        step = max(1.0, seconds / 20)
        while time.monotonic() < deadline:
            rss, fds = resources(pid)
            tally.samples.append((time.monotonic() - began, tally.served, rss, fds))
            await asyncio.sleep(step)

    sampler = asyncio.create_task(sample())
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    sampler.cancel()
    rss, fds = resources(pid)
    tally.samples.append((time.monotonic() - began, tally.served, rss, fds))
    return tally


def report(tally: Tally, seconds: float, concurrency: int) -> str:
    lines = [
        f"soak: {seconds:.0f} s at concurrency {concurrency}, {SESSIONS} sessions"
        f" (append clients), window {WINDOW} tokens, disk store",
        f"{'seconds':>8} {'requests':>9} {'RSS MB':>8} {'fds':>5}",
    ]
    lines += [f"{t:8.0f} {n:9d} {rss:8.1f} {fds:5d}" for t, n, rss, fds in tally.samples]
    warm = tally.samples[min(2, len(tally.samples) - 1)]  # after a tenth of the run
    middle, end = tally.samples[len(tally.samples) // 2], tally.samples[-1]
    growth = (end[2] - warm[2]) / warm[2]
    first_half = (middle[2] - warm[2]) / max(1, middle[1] - warm[1]) * 1000
    second_half = (end[2] - middle[2]) / max(1, end[1] - middle[1]) * 1000
    lines += [
        f"RSS after warm-up: {warm[2]:.1f} MB -> {end[2]:.1f} MB ({growth:+.1%});"
        f" per 1,000 requests: {first_half:+.2f} MB in the first half,"
        f" {second_half:+.2f} MB in the second",
        f"open descriptors: {tally.samples[0][3]} at start, {warm[3]} after warm-up,"
        f" {end[3]} at the end",
        f"requests: {tally.served} ({tally.served / seconds:.0f}/s); outcomes:",
    ]
    lines += [f"  {count:7d}  {kind}" for kind, count in sorted(tally.outcomes.items())]
    return "\n".join(lines)


async def benchmark(directory: Path, seconds: float = 600, concurrency: int = CONCURRENCY) -> str:
    with processes.upstream(faults=True) as upstream_url:
        config = {
            "model_list": processes.model_list(upstream_url, WINDOW),
            "router_settings": {"num_retries": 0},
            "server": {"request_timeout_seconds": 30},
        }
        with processes.context_proxy_process(config, directory) as (url, process):
            tally = await drive(url, process.pid, seconds, concurrency)
    return report(tally, seconds, concurrency)
