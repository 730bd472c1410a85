"""Bounded upstream replies (`server.max_upstream_reply_bytes`), measured on a fresh
proxy process per case: its CPU time to refuse (or finally fail) a chat stream whose one
event of N MB has no blank line, and its peak RSS (VmHWM) over a whole chat reply of
N MB of words. Not part of `python -m tests.benchmarks`: a measurement to rerun by hand,
against this checkout or another (`--root`, a checkout of an older commit: the proxy it
runs; the loopback upstream is this checkout's).

.venv/bin/python -m tests.benchmarks.bounds [--root DIR] [--cap BYTES] [--session]
    [--litellm] event:200 reply:64
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from proxy.cli.local import held_port, running_server
from tests.upstream import Reply, running_upstream

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[2]))
    parser.add_argument("--cap", type=int, default=None)
    parser.add_argument("--session", action="store_true")
    parser.add_argument("--litellm", action="store_true")
    parser.add_argument("cases", nargs="+")
    args = parser.parse_args()
    with running_upstream() as upstream, tempfile.TemporaryDirectory() as directory:
        for case in args.cases:
            kind, size = case.split(":")
            size_bytes = int(float(size) * 1_000_000)
            config = {
                "model_list": [
                    {
                        "model_name": "gpt-4o-mini",
                        "litellm_params": {
                            "model": "openai/gpt-4o-mini",
                            "api_base": upstream.base_url,
                            "api_key": "sk-bench",
                        },
                    }
                ],
                "router_settings": {"num_retries": 0},
                "server": {"request_timeout_seconds": 3600, "lean_upstream": not args.litellm},
                "session": {"path": str(Path(directory, case.replace(":", "-")))},
            }
            if args.cap is not None:
                config["server"]["max_upstream_reply_bytes"] = args.cap
            path = Path(directory, "config.yaml")
            path.write_text(yaml.safe_dump(config))
            with held_port() as port:
                command = [sys.executable, "-m", "proxy.cli", "serve", "--config", str(path)]
                command += ["--port", str(port)]
                url = f"http://127.0.0.1:{port}"
                env = {
                    **os.environ,
                    "PYTHONPATH": args.root,
                    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                }
                with running_server(
                    command, url + "/health/ready", cwd=args.root, env=env
                ) as process:
                    stream = kind == "event"
                    upstream.queue(Reply(flood=size_bytes, fail_after_chunks=1 if stream else None))
                    body = {
                        "model": "gpt-4o-mini",
                        "messages": [{"role": "user", "content": "hi"}],
                        "stream": stream,
                    }
                    rss_before = rss_mb(process.pid)
                    cpu_before = cpu_seconds(process.pid)
                    began = time.monotonic()
                    headers = {"X-Session-Id": case.replace(":", "-")} if args.session else {}
                    answer = httpx.post(
                        url + "/v1/chat/completions", json=body, headers=headers, timeout=3600
                    )
                    took = time.monotonic() - began
                    live = time.monotonic()
                    httpx.get(url + "/health/live", timeout=60)
                    live = time.monotonic() - live
                    cpu = cpu_seconds(process.pid) - cpu_before
                    text = answer.text
                    said = (
                        text[text.find('"message"') :][:150] if '"message"' in text else text[-150:]
                    )
                    print(
                        f"{case:>12}  status {answer.status_code}  wall {took:7.2f} s"
                        f"  proxy CPU {cpu:7.2f} s  RSS {rss_before:6.0f} -> peak"
                        f" {peak_rss_mb(process.pid):6.0f} MB (now {rss_mb(process.pid):6.0f})"
                        f"  /health/live after {live * 1000:.0f} ms  | {said}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
