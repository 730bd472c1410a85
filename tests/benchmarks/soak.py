"""Soak: does the proxy hold steady under long mixed load? (not part of CI's timing)

For `seconds` (10 minutes by default), `concurrency` clients send turns to thousands
of sessions through `context-proxy serve` (one worker, the disk store, a model window
small enough that long sessions are summarized): plain and streamed, some that the
upstream fails (500), stalls or cuts mid-stream, and some the client abandons before
the answer. It samples the proxy's resident memory and open file descriptors as it
goes, and prints them with the requests served and the outcomes by kind.

`soak --growing` (15 minutes by default) is the other shape long use takes: 40
sessions, each growing turn by turn as its client resends it, at 4 turns a second
in all, through all three doors (Chat Completions, Anthropic Messages, OpenAI
Responses; each door's sessions half to its own API upstream, half translated),
summarized again and again in a 4,096-token window. It prints the proxy's RSS at the
start, at half time and at the end, and passes if the second half grew it by < 5%.
With `--trace DIR` the proxy runs under tracemalloc (`tests/benchmarks/traced.py`),
and what it allocated between a third and four fifths of the run is printed.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import signal
import sys
import time
import tracemalloc
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import yaml

from proxy.cli.local import held_port, running_server
from tests.benchmarks import processes
from tests.benchmarks.conversations import MODEL, SESSION_HEADER
from tests.benchmarks.load import client, quantile

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


# The growing soak (`soak --growing`, issue 36): few sessions that each grow turn by turn,
# through all three doors, at a steady rate, for long enough that every session is
# summarized again and again. What it asks: does the proxy's memory level off?
GROWING_SESSIONS = 40
GROWING_RATE = 4.0  # turns a second, all sessions together
GROWING_SECONDS = 900
GROWTH_LIMIT = 0.05  # RSS over the run's second half, at most
CLAUDE = "bench-claude"  # an `anthropic/…` deployment: the Messages API upstream
RESPONSES = "bench-responses"  # an `openai/…` deployment with `native_api: true`
DOORS = ("chat", "messages", "responses")
# Each door's two models: the first in the door's own API upstream where there is one
# (`proxy.upstream.native`), the second through the chat translation (the chat door's second is
# LiteLLM's full call, to Anthropic's API).
DOOR_MODELS = {
    "chat": (MODEL, CLAUDE),
    "messages": (CLAUDE, MODEL),
    "responses": (RESPONSES, MODEL),
}
GROWING_SYSTEM = "You are a helpful assistant. Answer briefly."
SNAPSHOTS = (1 / 3, 4 / 5)  # `--trace`: minutes 5 and 12 of 15


@dataclass
class Conversation:
    """One growing session, as its client holds it (the door's own message shapes)."""

    session: str
    door: str
    model: str
    history: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0
    busy: bool = False


@dataclass
class Clients:
    openai: openai.AsyncOpenAI
    anthropic: anthropic.AsyncAnthropic


@dataclass
class GrowingTally:
    outcomes: Counter[str] = field(default_factory=Counter)
    # (seconds into the run, door, latency)
    latencies: list[tuple[float, str, float]] = field(default_factory=list)
    samples: list[tuple[float, int, float, int]] = field(default_factory=list)
    skipped: int = 0  # ticks with every session still busy with its last turn

    @property
    def served(self) -> int:
        return sum(self.outcomes.values())


def growing_models(upstream_url: str) -> list[dict[str, Any]]:
    limits = {"max_input_tokens": WINDOW, "max_output_tokens": 256}
    chat, *_ = processes.model_list(upstream_url, WINDOW)
    chat["model_info"] = limits
    claude = {
        "model_name": CLAUDE,
        "litellm_params": {
            "model": "anthropic/claude-sonnet-4-5",
            "api_base": upstream_url.removesuffix("/v1"),
            "api_key": processes.UPSTREAM_KEY,
        },
        "model_info": limits,
    }
    responses = {
        "model_name": RESPONSES,
        "litellm_params": chat["litellm_params"],
        "model_info": limits | {"native_api": True},
    }
    return [chat, claude, responses]


def conversations(count: int) -> list[Conversation]:
    """`count` sessions, the doors in turn, and each door's two models in turn."""
    return [
        Conversation(f"grow-{i}", DOORS[i % 3], DOOR_MODELS[DOORS[i % 3]][(i // 3) % 2])
        for i in range(count)
    ]


async def chat_turn(clients: Clients, c: Conversation, text: str, stream: bool) -> None:
    user = {"role": "user", "content": text}
    params: dict[str, Any] = {
        "model": c.model,
        "messages": [{"role": "system", "content": GROWING_SYSTEM}, *c.history, user],
        "extra_headers": {SESSION_HEADER: c.session},
    }
    if stream:
        parts = []
        async for chunk in await clients.openai.chat.completions.create(**params, stream=True):
            parts += [choice.delta.content or "" for choice in chunk.choices]
        reply = "".join(parts)
    else:
        completion = await clients.openai.chat.completions.create(**params)
        reply = completion.choices[0].message.content or ""
    c.history += [user, {"role": "assistant", "content": reply}]


async def messages_turn(clients: Clients, c: Conversation, text: str, stream: bool) -> None:
    user = {"role": "user", "content": text}
    params: dict[str, Any] = {
        "model": c.model,
        "max_tokens": 256,
        "system": GROWING_SYSTEM,
        "messages": [*c.history, user],
        "extra_headers": {SESSION_HEADER: c.session},
    }
    if stream:
        async with clients.anthropic.messages.stream(**params) as events:
            message = await events.get_final_message()
    else:
        message = await clients.anthropic.messages.create(**params)
    blocks = [block.model_dump(exclude_none=True) for block in message.content]
    c.history += [user, {"role": "assistant", "content": blocks}]


async def responses_turn(clients: Clients, c: Conversation, text: str, stream: bool) -> None:
    user = {"type": "message", "role": "user", "content": text}
    params: dict[str, Any] = {
        "model": c.model,
        "instructions": GROWING_SYSTEM,
        "input": [*c.history, user],
        "extra_headers": {SESSION_HEADER: c.session},
    }
    if stream:
        async with clients.openai.responses.stream(**params) as events:
            response = await events.get_final_response()
    else:
        response = await clients.openai.responses.create(**params)
    c.history += [user, *(item.model_dump(exclude_none=True) for item in response.output)]


TURNS = {"chat": chat_turn, "messages": messages_turn, "responses": responses_turn}


async def drive_growing(
    url: str,
    pid: int,
    seconds: float,
    sessions: int,
    rate: float,
    snapshot: Any = None,
) -> tuple[GrowingTally, list[Conversation]]:
    """A turn every 1/`rate` s, to the next session not still waiting for its last
    one (round robin). `snapshot(n)`, when given, is called at the `SNAPSHOTS`."""
    tally = GrowingTally()
    held = conversations(sessions)
    rng = random.Random(36)
    began = time.monotonic()
    deadline = began + seconds
    clients = Clients(
        openai.AsyncOpenAI(base_url=url + "/v1", api_key="soak", max_retries=0, timeout=60),
        anthropic.AsyncAnthropic(base_url=url, api_key="soak", max_retries=0, timeout=60),
    )

    async def turn(c: Conversation) -> None:
        words = " ".join(rng.choices(_WORDS, k=rng.randint(20, 300)))
        text = f"[{c.session} turn {c.turns}] {words}"
        stream = rng.random() < 0.5
        kind = f"{c.door} to {c.model}, {'streamed' if stream else 'plain'}"
        started = time.monotonic()
        try:
            await TURNS[c.door](clients, c, text, stream)
        except Exception as exc:  # counted and shown: the run goes on
            status = getattr(exc, "status_code", None)
            tally.outcomes[f"{kind}: {status or type(exc).__name__}"] += 1
        else:
            tally.outcomes[f"{kind}: ok"] += 1
            tally.latencies.append((started - began, c.door, time.monotonic() - started))
        finally:
            c.turns += 1
            c.busy = False

    async def sample() -> None:
        step = max(1.0, seconds / 90)
        while True:
            rss, fds = resources(pid)
            tally.samples.append((time.monotonic() - began, tally.served, rss, fds))
            await asyncio.sleep(step)

    sampler = asyncio.create_task(sample())
    running: set[asyncio.Task[None]] = set()
    cursor, tick = 0, 0
    due = [began + share * seconds for share in SNAPSHOTS] if snapshot is not None else []
    while time.monotonic() < deadline:
        if due and time.monotonic() >= due[0]:
            # Taken between turns (none in flight, the summaries they started done), so
            # that what differs is what the proxy keeps, not what it was working on.
            due.pop(0)
            if running:
                await asyncio.wait(running)
            await asyncio.sleep(2.0)
            await asyncio.to_thread(snapshot, len(SNAPSHOTS) - len(due))
            tick = math.ceil((time.monotonic() - began) * rate)
        idle = [held[(cursor + i) % len(held)] for i in range(len(held))]
        chosen = next((c for c in idle if not c.busy), None)
        if chosen is None:
            tally.skipped += 1
        else:
            chosen.busy = True
            cursor = (held.index(chosen) + 1) % len(held)
            task = asyncio.create_task(turn(chosen))
            running.add(task)
            task.add_done_callback(running.discard)
        tick += 1
        await asyncio.sleep(max(0.0, began + tick / rate - time.monotonic()))
    if running:
        await asyncio.wait(running, timeout=60)
    sampler.cancel()
    rss, fds = resources(pid)
    tally.samples.append((time.monotonic() - began, tally.served, rss, fds))
    await clients.openai.close()
    await clients.anthropic.close()
    return tally, held


def _rss_at(samples: list[tuple[float, int, float, int]], second: float) -> float:
    """The RSS of the sample nearest `second` into the run."""
    return min(samples, key=lambda s: abs(s[0] - second))[2]


def growing_report(
    tally: GrowingTally,
    held: list[Conversation],
    seconds: float,
    rate: float,
    summaries: dict[str, float],
) -> str:
    doors = Counter(c.door for c in held)
    lines = [
        f"soak (growing): {seconds:.0f} s, {len(held)} sessions growing turn by turn"
        f" ({', '.join(f'{doors[d]} {d}' for d in DOORS)} door; half of each door's to"
        f" its own API upstream, half translated), {rate:g} turns/s, window {WINDOW}"
        " tokens, disk store",
        f"{'seconds':>8} {'requests':>9} {'RSS MiB':>8} {'fds':>5}",
    ]
    step = max(1, round(len(tally.samples) / 16))
    shown = tally.samples[::step]
    if shown[-1] is not tally.samples[-1]:
        shown.append(tally.samples[-1])
    lines += [f"{t:8.0f} {n:9d} {rss:8.1f} {fds:5d}" for t, n, rss, fds in shown]
    start, half, end = (
        tally.samples[0][2],
        _rss_at(tally.samples, seconds / 2),
        tally.samples[-1][2],
    )
    growth = (end - half) / half
    verdict = "pass" if growth < GROWTH_LIMIT else "FAIL"
    lines += [
        f"RSS: start {start:.1f} MiB, half time {half:.1f} MiB, end {end:.1f} MiB",
        f"RSS growth over the second half: {growth:+.1%}"
        f" ({verdict}: the limit is < {GROWTH_LIMIT:.0%})",
        f"open descriptors: {tally.samples[0][3]} at start,"
        f" {min(tally.samples, key=lambda s: abs(s[0] - seconds / 2))[3]} at half time,"
        f" {tally.samples[-1][3]} at the end",
    ]
    for door in DOORS:
        halves = [
            [
                latency
                for t, d, latency in tally.latencies
                if d == door and (t < seconds / 2) == first
            ]
            for first in (True, False)
        ]
        p50s = " / ".join(f"{quantile(h, 0.5) * 1000:.0f}" for h in halves)
        p99s = " / ".join(f"{quantile(h, 0.99) * 1000:.0f}" for h in halves)
        lines.append(f"{door} door latency, first half / second half: p50 {p50s} ms, p99 {p99s} ms")
    longest = max(held, key=lambda c: len(c.history))
    made = ", ".join(f"{count:.0f} {outcome}" for outcome, count in sorted(summaries.items()))
    lines += [
        f"summaries: {made or 'none'}; longest session: {len(longest.history)} messages"
        f" ({longest.door} door), {len(orjson.dumps(longest.history)) / 1024:.0f} KiB as resent",
        f"requests: {tally.served} ({tally.served / seconds:.1f}/s),"
        f" {tally.skipped} ticks skipped with every session busy; outcomes:",
    ]
    lines += [f"  {count:7d}  {kind}" for kind, count in sorted(tally.outcomes.items())]
    return "\n".join(lines)


async def summaries_made(url: str) -> dict[str, float]:
    """The proxy's summaries so far, by outcome (its `/metrics`)."""
    async with client() as http, http.get(url + "/metrics") as response:
        text = await response.text()
    made: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith("context_proxy_summarizations_total{"):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            made[outcome] += float(line.rsplit(" ", 1)[1])
    return dict(made)


def compared(directory: Path, top: int = 25) -> str:
    """What grew between the two tracemalloc snapshots, largest first, with where."""
    first, second = (
        tracemalloc.Snapshot.load(str(directory / f"snapshot-{n}.pickle"))
        for n in range(1, len(SNAPSHOTS) + 1)
    )
    keep = [tracemalloc.Filter(False, tracemalloc.__file__)]
    first, second = first.filter_traces(keep), second.filter_traces(keep)
    total = sum(s.size for s in second.statistics("filename")) - sum(
        s.size for s in first.statistics("filename")
    )
    lines = [
        f"tracemalloc, snapshot at {SNAPSHOTS[0]:.0%} of the run against {SNAPSHOTS[1]:.0%}:"
        f" {total / 2**20:+.1f} MiB traced in all; the largest differences by line:"
    ]
    for stat in second.compare_to(first, "lineno")[:top]:
        lines.append(
            f"  {stat.size_diff / 1024:+9.0f} KiB {stat.count_diff:+8d} blocks  {stat.traceback[0]}"
        )
    lines.append("the largest by traceback:")
    for stat in second.compare_to(first, "traceback")[: top // 3]:
        lines.append(f"  {stat.size_diff / 1024:+9.0f} KiB {stat.count_diff:+8d} blocks")
        lines += [f"      {frame}" for frame in reversed(stat.traceback)]
    return "\n".join(lines)


async def growing(
    directory: Path,
    seconds: float = GROWING_SECONDS,
    sessions: int = GROWING_SESSIONS,
    rate: float = GROWING_RATE,
    trace: Path | None = None,
    frames: int = 8,
) -> str:
    """The growing soak; with `trace`, the proxy runs under tracemalloc (`traced`), its
    snapshots go there, and what grew between them is printed after the report."""
    with processes.upstream(faults=True) as upstream_url, held_port() as port:
        config = {
            "model_list": growing_models(upstream_url),
            "router_settings": {"num_retries": 0},
            "server": {"request_timeout_seconds": 30},
            "session": {"path": str(directory / "growing-sessions")},
        }
        path = directory / "growing.yaml"
        path.write_text(yaml.safe_dump(config))
        command = [sys.executable, "-m", "proxy.cli"]
        if trace is not None:
            trace.mkdir(parents=True, exist_ok=True)
            command = [sys.executable, "-m", "tests.benchmarks.traced", str(trace), str(frames)]
        command += ["serve", "--config", str(path), "--port", str(port)]
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        root = Path(__file__).resolve().parents[2]
        # Under tracemalloc, importing LiteLLM alone takes a minute on a busy machine.
        ready = 60 if trace is None else 600
        with running_server(command, url + "/health/ready", ready, cwd=root, env=env) as process:

            def snapshot(number: int) -> None:
                assert trace is not None
                process.send_signal(signal.SIGUSR1)
                wanted = trace / f"snapshot-{number}.pickle"
                for _ in range(1200):  # a snapshot of a big heap takes a while to write
                    if wanted.exists():
                        return
                    time.sleep(0.1)

            tally, held = await drive_growing(
                url, process.pid, seconds, sessions, rate, snapshot if trace else None
            )
            summaries = await summaries_made(url)
    text = growing_report(tally, held, seconds, rate, summaries)
    if trace is not None:
        text += "\n" + compared(trace)
    return text
