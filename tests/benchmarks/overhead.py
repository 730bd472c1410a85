"""What a hop through the proxy costs on a small conversation, against the direct call and
LiteLLM's own proxy, in one run: p50/p99 latency and req/s at concurrency 1 and 32,
streaming and not."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.benchmarks import processes
from tests.benchmarks.conversations import turns
from tests.benchmarks.load import Call, Result, client, run

DIRECT = "direct"
PROXY = "context-proxy"
SESSION = "context-proxy + session"
NEW = "context-proxy, new sessions"
LITELLM = "litellm proxy"
START_MESSAGES = 10
TURNS_PER_SESSION = 5
CLIENT_KEY = {"Authorization": "Bearer sk-bench-client"}


@dataclass(frozen=True)
class Sizes:
    """How many calls each worker sends (warm-up excluded) at each concurrency."""

    single: int = 400
    many: int = 50
    warmup: int = 10
    # Targets take turns this many times, so drift hits them alike: one at a time in
    # slices of 8 calls; 32 at a time in 5 slices (each long enough to reach steady state).
    rounds_single: int = 50
    rounds_many: int = 5

    @classmethod
    def quick(cls) -> Sizes:
        return cls(single=10, many=2, warmup=2, rounds_single=2, rounds_many=2)


def workload(target: str, concurrency: int, calls: int, stream: bool) -> list[list[Call]]:
    """Per worker, consecutive 5-turn conversations of 10–18 messages (fresh session ids);
    for `NEW`, each call the first turn of a session of its own."""
    per = 1 if target == NEW else TURNS_PER_SESSION
    nonce = uuid.uuid4().hex[:8]
    workers = []
    for worker in range(concurrency):
        sequence: list[Call] = []
        conversation = 0
        while len(sequence) < calls:
            name = f"{nonce}-{worker}-{conversation}"
            session = target in (SESSION, NEW)
            sequence += turns(name, START_MESSAGES, per, session=session, stream=stream)
            conversation += 1
        workers.append([Call(c.body, c.headers | CLIENT_KEY) for c in sequence[:calls]])
    return workers


async def measure(urls: dict[str, str], sizes: Sizes) -> dict[tuple[bool, int, str], Result]:
    """Every (stream, concurrency, target). The targets take turns in short rounds, each
    round a slice of every worker's calls, so a noisy stretch of the machine hits all of
    them alike; one client keeps its connections across rounds."""
    results = {}
    async with client() as session:
        for stream in (False, True):
            for concurrency, calls, rounds in (
                (1, sizes.single, sizes.rounds_single),
                (32, sizes.many, sizes.rounds_many),
            ):
                work = {
                    target: workload(target, concurrency, calls + sizes.warmup, stream)
                    for target in urls
                }
                for target, workers in work.items():  # connections and caches warm
                    warm = [w[: sizes.warmup] for w in workers]
                    await run(session, urls[target], warm, stream=stream)
                parts: dict[str, list[Result]] = {target: [] for target in urls}
                step = -(-calls // rounds)
                for start in range(sizes.warmup, calls + sizes.warmup, step):
                    for target, workers in work.items():
                        chunk = [w[start : start + step] for w in workers]
                        parts[target].append(await run(session, urls[target], chunk, stream=stream))
                for target, pieces in parts.items():
                    result = Result.merged(pieces)
                    if result.errors:
                        raise RuntimeError(f"{target}: {result.errors} requests failed")
                    results[(stream, concurrency, target)] = result
    return results


def report(results: dict[tuple[bool, int, str], Result]) -> str:
    """The table, then what it means: own time, the ratio to LiteLLM's, throughput."""
    lines = [
        f"{'stream':6} {'conc':>4}  {'target':27} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'req/s':>8} {'TTFT p50 ms':>12}"
    ]
    for (stream, concurrency, target), result in results.items():
        ttft = result.ttft_p50
        lines.append(
            f"{'yes' if stream else 'no':6} {concurrency:>4}  {target:27} "
            f"{result.p50 * 1e3:8.2f} {result.p99 * 1e3:8.2f} {result.rate:8.0f} "
            f"{ttft * 1e3 if ttft is not None else float('nan'):12.2f}"
        )
    lines.append("")
    for stream in (False, True):
        for concurrency in (1, 32):
            row = {t: r for (s, c, t), r in results.items() if s == stream and c == concurrency}
            lines.append(_summary(stream, concurrency, row))
    return "\n".join(lines)


def _summary(stream: bool, concurrency: int, row: dict[str, Result]) -> str:
    direct = row[DIRECT].p50
    own = {target: (result.p50 - direct) * 1e3 for target, result in row.items()}
    text = (
        f"stream={'yes' if stream else 'no'} c={concurrency}: own p50 time "
        f"{PROXY} {own[PROXY]:+.2f} ms, with session {own[SESSION]:+.2f} ms"
    )
    if LITELLM in row:
        ratio = own[PROXY] / own[LITELLM] if own[LITELLM] > 0 else float("nan")
        throughput = row[PROXY].rate / row[LITELLM].rate
        text += (
            f", {LITELLM} {own[LITELLM]:+.2f} ms; overhead ratio (b-a)/(c-a) {ratio:.2f}; "
            f"throughput {throughput:.2f}x LiteLLM's"
        )
    if concurrency > 1:
        share = row[NEW].rate / row[PROXY].rate
        text += (
            f"; target: new sessions at >= 0.8x the no-session throughput:"
            f" {row[NEW].rate:.0f} against {row[PROXY].rate:.0f} req/s = {share:.2f}x"
            f"  {'PASS' if share >= 0.8 else 'MISS'}"
        )
    if stream and row[DIRECT].ttft_p50 is not None:
        added = {
            target: (result.ttft_p50 - row[DIRECT].ttft_p50) * 1e3
            for target, result in row.items()
            if result.ttft_p50 is not None and target != DIRECT
        }
        text += "; added TTFT " + ", ".join(f"{t} {v:+.2f} ms" for t, v in added.items())
    return text


async def benchmark(directory: Path, sizes: Sizes, with_litellm: bool = True) -> str:
    with processes.upstream() as upstream_url:
        config: dict[str, Any] = {"model_list": processes.model_list(upstream_url)}
        with processes.context_proxy(config, directory) as proxy_url:
            urls = {
                DIRECT: upstream_url + "/chat/completions",
                PROXY: proxy_url + "/v1/chat/completions",
                SESSION: proxy_url + "/v1/chat/completions",
                NEW: proxy_url + "/v1/chat/completions",
            }
            if not with_litellm:
                return report(await measure(urls, sizes))
            with processes.litellm_proxy(config, directory) as litellm_url:
                urls[LITELLM] = litellm_url + "/v1/chat/completions"
                return report(await measure(urls, sizes))
