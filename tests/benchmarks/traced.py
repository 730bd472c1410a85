"""`context-proxy serve` under tracemalloc, for the soak's `--trace` (no debug code in
the proxy): `python -m tests.benchmarks.traced DIRECTORY FRAMES serve --config …`.

Each SIGUSR1 writes a snapshot, `DIRECTORY/snapshot-N.pickle` (N counts from 1), after
a full collection, so the soak can compare what is allocated at two times. Tracing
starts once the proxy's modules (LiteLLM's among them) are imported: what they hold
from the start is no part of any difference, and tracing them would take minutes.
"""

from __future__ import annotations

import gc
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType


def main(directory: Path, frames: int, argv: list[str]) -> int:
    import proxy.http.app
    import proxy.upstream.client  # noqa: F401 - imported before tracing starts
    from proxy.cli.main import main as cli

    tracemalloc.start(frames)
    taken = 0

    def snapshot(signum: int, frame: FrameType | None) -> None:
        nonlocal taken
        taken += 1
        gc.collect()
        path = directory / f"snapshot-{taken}.pickle"
        tracemalloc.take_snapshot().dump(str(path.with_suffix(".part")))
        path.with_suffix(".part").rename(path)  # whole once it is there

    signal.signal(signal.SIGUSR1, snapshot)
    return cli(argv)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]))
