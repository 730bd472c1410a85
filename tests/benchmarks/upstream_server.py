"""The test upstream in a process of its own: `python -m tests.benchmarks.upstream_server PORT`.

It answers at once (echoing the last user message), keeps no record of requests and
estimates usage cheaply, so what a benchmark times is the client and the proxy, not
the fake provider.
"""

from __future__ import annotations

import sys

import uvicorn

from tests.upstream import FakeUpstream


def main(port: int) -> None:
    upstream = FakeUpstream(record=False, exact_usage=False)
    uvicorn.run(upstream.app(), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(int(sys.argv[1]))
