"""A load generator: requests at a fixed concurrency, latency and time to first token.

aiohttp's client costs about a quarter of httpx's CPU per request, which matters on a
two-core machine where the client, the proxy and the upstream share the cores. Every
target is driven by the same client, so its cost is the same in every row.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp
import orjson


@dataclass(frozen=True)
class Call:
    """One request: the JSON body and its extra headers."""

    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class Result:
    """What one run measured (seconds)."""

    latencies: list[float]
    first_tokens: list[float]
    elapsed: float
    errors: int

    @classmethod
    def merged(cls, results: Sequence[Result]) -> Result:
        """Several runs of one target as one (elapsed times add up)."""
        return cls(
            [x for r in results for x in r.latencies],
            [x for r in results for x in r.first_tokens],
            sum(r.elapsed for r in results),
            sum(r.errors for r in results),
        )

    @property
    def p50(self) -> float:
        return quantile(self.latencies, 0.5)

    @property
    def p99(self) -> float:
        return quantile(self.latencies, 0.99)

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0

    @property
    def ttft_p50(self) -> float | None:
        return quantile(self.first_tokens, 0.5) if self.first_tokens else None


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile by nearest rank (no interpolation across a gap)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def run(
    session: aiohttp.ClientSession, url: str, workers: Sequence[Sequence[Call]], *, stream: bool
) -> Result:
    """Each worker sends its calls in order (a session's turns stay sequential); all
    workers run at once, so the concurrency is `len(workers)`. The client `session` is
    kept across runs, so its connections stay open (as an SDK's would)."""
    latencies: list[float] = []
    first_tokens: list[float] = []
    errors = 0

    async def worker(calls: Sequence[Call]) -> None:
        nonlocal errors
        for call in calls:
            timing = await post(session, url, call, stream=stream)
            if timing is None:
                errors += 1
            else:
                latencies.append(timing[0])
                if timing[1] is not None:
                    first_tokens.append(timing[1])

    started = time.perf_counter()
    await asyncio.gather(*(worker(calls) for calls in workers))
    elapsed = time.perf_counter() - started
    return Result(latencies, first_tokens, elapsed, errors)


def client() -> aiohttp.ClientSession:
    """A keep-alive client with no connection limit and a generous timeout."""
    connector = aiohttp.TCPConnector(limit=0)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600))


async def post(
    session: aiohttp.ClientSession, url: str, call: Call, *, stream: bool, method: str = "POST"
) -> tuple[float, float | None] | None:
    """Send one call; (latency, time to first token) in seconds, or None if not a 200.

    A kept-alive connection the server closed while idle (uvicorn closes them after 5 s,
    and targets wait while the others take their turn) is retried once on a fresh one,
    as HTTP clients do; the timing is the retry's. The close can race the write, so a
    connection that fails while the request goes out ("Can not write request body",
    "Cannot write to closing transport") is retried the same way."""
    headers = {"content-type": "application/json", **call.headers}
    for attempt in range(2):
        started = time.perf_counter()
        first: float | None = None
        try:
            async with session.request(method, url, data=call.body, headers=headers) as response:
                if stream:
                    first = await _read_stream(response, started)
                else:
                    await response.read()
                ok = response.status == 200
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, ConnectionResetError):
            if attempt:
                raise
            continue
        return (time.perf_counter() - started, first) if ok else None
    return None


async def _read_stream(response: aiohttp.ClientResponse, started: float) -> float | None:
    """Read an SSE body to its end; the time until the first content delta arrived."""
    first: float | None = None
    buffer = b""
    async for data in response.content.iter_any():
        if first is not None:
            continue
        buffer += data
        *events, buffer = buffer.split(b"\n\n")
        for event in events:
            if event.startswith(b"data: {") and _has_content(event[6:]):
                first = time.perf_counter() - started
                break
    return first


def _has_content(data: bytes) -> bool:
    chunk = orjson.loads(data)
    return any((choice.get("delta") or {}).get("content") for choice in chunk.get("choices") or [])
