"""The test upstream in a process of its own: `python -m tests.benchmarks.upstream_server PORT`.

It answers at once (echoing the last user message), keeps no record of requests and
estimates usage cheaply, so what a benchmark times is the client and the proxy, not
the fake provider. With `--faults` (the soak benchmarks), every answer is short (the
echo's first 200 characters, in each of the three APIs it speaks), and a last user
message holding `[fail]` gets a 500, `[slow]` an answer after 2 s, `[cut]` a stream cut
after two chunks.
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn

from tests import upstream_messages, upstream_responses
from tests.upstream import FakeUpstream, Reply


def faulty(body: dict[str, Any]) -> str | Reply:
    if "input" in body:  # the Responses API
        text = upstream_responses.last_user_text(body)
    elif isinstance(body["messages"][-1].get("content"), list):  # the Messages API's blocks
        text = upstream_messages.last_user_text(body)
    else:
        text = str(body["messages"][-1].get("content"))
    if "[fail]" in text:
        return Reply(status=500, error_message="injected failure")
    if "[slow]" in text:
        return Reply(stall_seconds=2.0)
    if "[cut]" in text:
        return Reply(content="a b c d e f", fail_after_chunks=2)
    return "echo: " + text[:200]


def main(port: int, faults: bool) -> None:
    upstream = FakeUpstream(record=False, exact_usage=False)
    if faults:
        upstream.default = Reply(respond=faulty)
    uvicorn.run(upstream.app(), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(int(sys.argv[1]), "--faults" in sys.argv[2:])
