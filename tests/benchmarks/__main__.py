"""`python -m tests.benchmarks [overhead|history|stores|context|scorecard|adversarial|cost|doors
|all|soak|fuzz|locomo] [--quick] [--no-litellm]`.

`soak --growing [--minutes N] [--trace DIR]`: the soak of few growing sessions on
all three doors (`tests/benchmarks/soak.py`).

`locomo`: LoCoMo's long real conversations, in one session and across sessions under
one memory id: is each question's evidence in what the model reads, against a sliding
window and plain BM25 (`tests/benchmarks/locomo.py`; minutes: not part of `all`).

`calls`: the calls between the proxy's modules during a plain and a summarising turn
(`tests/benchmarks/calls.py`; counts, not times: not part of `all`).

`fuzz [--count N] [--seed S] [--case N ...]`: 12,000 hostile requests over the three
doors (`tests/benchmarks/fuzz.py`); `--case` sends only those cases, one at a time.

Benchmarks print ratios from one run on this machine; they are not part of the test
suite (timings on shared machines are noisy), but `tests/benchmarks/test_harness.py`
runs each one in its quick form.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import sys
import tempfile
from pathlib import Path

from tests.benchmarks import (
    adversarial,
    calls,
    context,
    cost,
    doors,
    fuzz,
    history,
    locomo,
    overhead,
    scorecard,
    soak,
    stores,
)

# `all`; the soak, the fuzz and locomo run alone
BENCHMARKS = (
    "overhead",
    "history",
    "stores",
    "context",
    "scorecard",
    "adversarial",
    "cost",
    "doors",
)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    for line in (
        Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    ):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks", description=__doc__)
    parser.add_argument(
        "which",
        nargs="?",
        default="all",
        choices=(*BENCHMARKS, "all", "soak", "fuzz", "locomo", "calls"),
    )
    parser.add_argument("--quick", action="store_true", help="a few requests: checks the harness")
    parser.add_argument("--no-litellm", action="store_true", help="skip LiteLLM's proxy")
    parser.add_argument(
        "--growing", action="store_true", help="soak: 40 growing sessions on all three doors"
    )
    parser.add_argument("--minutes", type=float, help="soak: how long (default 10, growing 15)")
    parser.add_argument(
        "--trace", type=Path, help="soak --growing: tracemalloc snapshots into this directory"
    )
    parser.add_argument("--count", type=int, help="fuzz: requests (default 12,000; quick 300)")
    parser.add_argument("--seed", type=int, default=fuzz.SEED, help="fuzz: the run's seed")
    parser.add_argument(
        "--case", type=int, nargs="+", help="fuzz: send only these cases, one at a time"
    )
    args = parser.parse_args(argv)
    # The scorecard imports the proxy, and with it LiteLLM: a few hundred thousand
    # objects that a full collection in this client walks for ~170 ms, which `history`
    # then measured as a health check the proxy kept waiting. Kept out of the client's
    # collections, as the proxy keeps them out of its own.
    gc.freeze()
    print(f"machine: {machine()}")
    chosen = BENCHMARKS if args.which == "all" else (args.which,)
    with tempfile.TemporaryDirectory(prefix="context-proxy-bench-") as directory:
        for name in chosen:
            print(f"\n== {name} ==", flush=True)
            if name == "overhead":
                sizes = overhead.Sizes.quick() if args.quick else overhead.Sizes()
                text = asyncio.run(
                    overhead.benchmark(Path(directory), sizes, with_litellm=not args.no_litellm)
                )
            elif name == "history":
                rounds = 3 if args.quick else 15
                text = asyncio.run(history.benchmark(Path(directory), rounds))
            elif name == "stores":
                text = asyncio.run(stores.benchmark(20 if args.quick else 200, quick=args.quick))
            elif name == "soak" and args.growing:
                seconds = 20 if args.quick else soak.GROWING_SECONDS
                seconds = args.minutes * 60 if args.minutes else seconds
                text = asyncio.run(soak.growing(Path(directory), seconds, trace=args.trace))
            elif name == "soak":
                seconds = 8 if args.quick else 600
                seconds = args.minutes * 60 if args.minutes else seconds
                text = asyncio.run(soak.benchmark(Path(directory), seconds))
            elif name == "fuzz" and args.case:
                text = asyncio.run(fuzz.cases(Path(directory), args.case, args.seed))
            elif name == "fuzz":
                count = args.count or (fuzz.QUICK_COUNT if args.quick else fuzz.COUNT)
                text = asyncio.run(fuzz.benchmark(Path(directory), count, args.seed))
            elif name == "scorecard":
                text = scorecard.benchmark(Path(directory), quick=args.quick)
            elif name == "adversarial":
                text = adversarial.benchmark(Path(directory), quick=args.quick)
            elif name == "calls":
                text = calls.benchmark(Path(directory))
            elif name == "locomo":
                text = locomo.benchmark(Path(directory), quick=args.quick)
            elif name == "cost":
                text = cost.benchmark(Path(directory), quick=args.quick)
            elif name == "doors":
                rounds, lengths = (
                    (doors.QUICK_ROUNDS, doors.QUICK_LENGTHS)
                    if args.quick
                    else (doors.ROUNDS, doors.LENGTHS)
                )
                text = asyncio.run(
                    doors.benchmark(Path(directory), rounds, lengths, not args.no_litellm)
                )
            else:
                text = context.benchmark(Path(directory), 40 if args.quick else context.TURNS)
            print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
