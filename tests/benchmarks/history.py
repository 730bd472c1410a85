"""The proxy's own time as a conversation grows: 10 to 5,000 messages resent in full.

For each length one session is created, then each turn resends the whole conversation
plus the echoed reply and a new user message, as SDK clients do. The same bodies go to
the upstream directly, interleaved turn by turn, so "own time" is the proxy's p50 minus
the direct p50 for the identical body. Beside it: one orjson parse + dump of that body
(the floor for any proxy that reads and forwards JSON), and the longest a health check
waited while those turns ran (how long the event loop was blocked).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from tests.benchmarks import processes
from tests.benchmarks.conversations import turns
from tests.benchmarks.load import Call, client, post, quantile

LENGTHS = (10, 100, 1000, 5000)


@dataclass(frozen=True)
class Row:
    messages: int
    body_bytes: int
    direct: float
    session: float  # p50 through the proxy with a session header
    stateless: float  # p50 through the proxy without one
    body_pass: float  # one orjson parse + dump of the body
    health_max: float  # the longest /health/live took meanwhile


def body_pass(body: bytes) -> float:
    """The time of one orjson parse + dump of `body`."""
    started = time.perf_counter()
    orjson.dumps(orjson.loads(body))
    return time.perf_counter() - started


async def measure_length(
    session: aiohttp.ClientSession, upstream: str, proxy: str, messages: int, rounds: int
) -> Row:
    name = f"history-{uuid.uuid4().hex[:8]}-{messages}"
    with_session = turns(name, messages, rounds + 1, session=True)
    without = turns(name, messages, rounds + 1, session=False)
    url = proxy + "/v1/chat/completions"
    await post(session, url, with_session[0], stream=False)  # creates the session
    await post(session, upstream, without[0], stream=False)
    timings: dict[str, list[float]] = {"direct": [], "session": [], "stateless": [], "pass": []}
    health: list[float] = []
    pinging = asyncio.create_task(_ping(session, proxy + "/health/live", health))
    try:
        for turn in range(1, rounds + 1):
            for target, target_url, call in (
                ("direct", upstream, without[turn]),
                ("session", url, with_session[turn]),
                ("stateless", url, without[turn]),
            ):
                timing = await post(session, target_url, call, stream=False)
                if timing is None:
                    raise RuntimeError(f"{target} failed at {messages} messages")
                timings[target].append(timing[0])
            timings["pass"].append(body_pass(with_session[turn].body))  # in the same stretch
    finally:
        pinging.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pinging
    body = with_session[-1].body
    return Row(
        messages=messages,
        body_bytes=len(body),
        direct=quantile(timings["direct"], 0.5),
        session=quantile(timings["session"], 0.5),
        stateless=quantile(timings["stateless"], 0.5),
        body_pass=statistics.median(timings["pass"]),
        health_max=max(health, default=float("nan")),
    )


async def _ping(session: aiohttp.ClientSession, url: str, times: list[float]) -> None:
    while True:
        timing = await post(session, url, Call(b"", {}), stream=False, method="GET")
        if timing is not None:
            times.append(timing[0])
        await asyncio.sleep(0.005)


def report(rows: list[Row]) -> str:
    lines = [
        f"{'messages':>8} {'body KB':>8} {'direct p50':>10} {'own, session':>12} "
        f"{'own, none':>10} {'orjson pass':>11} {'max health':>10}   (ms)"
    ]
    for row in rows:
        lines.append(
            f"{row.messages:>8} {row.body_bytes / 1024:8.0f} {row.direct * 1e3:10.2f} "
            f"{(row.session - row.direct) * 1e3:12.2f} {(row.stateless - row.direct) * 1e3:10.2f} "
            f"{row.body_pass * 1e3:11.2f} {row.health_max * 1e3:10.2f}"
        )
    first, last = rows[0], rows[-1]
    growth = (last.session - last.direct) - (first.session - first.direct)
    lines.append(
        f"\nown time (session) grew by {growth * 1e3:.2f} ms from {first.messages} to "
        f"{last.messages} messages = {growth / last.body_pass:.1f} body passes "
        f"(target: at most 3)"
    )
    return "\n".join(lines)


async def benchmark(directory: Path, rounds: int = 15, lengths: tuple[int, ...] = LENGTHS) -> str:
    with processes.upstream() as upstream_url:
        config: dict[str, Any] = {"model_list": processes.model_list(upstream_url)}
        with processes.context_proxy(config, directory) as proxy_url:
            async with client() as session:
                rows = [
                    await measure_length(
                        session, upstream_url + "/chat/completions", proxy_url, n, rounds
                    )
                    for n in lengths
                ]
    return report(rows)
