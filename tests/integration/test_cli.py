"""`context-proxy serve` as a user runs it: a real process, no network."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai

from proxy.local import held_port
from tests.conftest import MODEL, proxy_config
from tests.servers import guarded_env, start, stop, wait_ready
from tests.upstream import FakeUpstream, Reply
from tests.waiting import eventually

# Checks the guard is in place before anything could leave the machine, then resolves a
# name that is never looked up: the guard refuses it and logs the attempt.
GUARD_PROBE = """
import socket, sys
if socket.getaddrinfo.__qualname__ != "_guarded_getaddrinfo":
    sys.exit(3)
try:
    socket.getaddrinfo("guard-probe.invalid", 443)
except OSError as exc:
    sys.exit(0 if exc.errno == 101 else 4)
sys.exit(5)
"""


def test_the_network_guard_is_active(tmp_path: Path) -> None:
    """The no-network tests below prove something only while the guard is loaded."""
    netlog = tmp_path / "net.log"
    done = subprocess.run(
        [sys.executable, "-c", GUARD_PROBE], env=guarded_env(netlog), timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, "the no-network guard is not active in guarded processes"
    assert netlog.read_text() == "resolve guard-probe.invalid\n"


def test_serve_with_no_config_and_no_network(tmp_path: Path) -> None:
    netlog = tmp_path / "net.log"
    with held_port() as port:
        process = start(["--port", str(port)], netlog, tmp_path)
        try:
            seconds = wait_ready(f"http://127.0.0.1:{port}", process)
            print(f"ready in {seconds:.1f}s")
            assert httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"] == []
        finally:
            stop(process)
        attempts = netlog.read_text() if netlog.exists() else ""
        assert attempts == "", f"the proxy tried to reach the network:\n{attempts}"


def test_serve_config_file_routes_to_upstream(tmp_path: Path, upstream: FakeUpstream) -> None:
    import yaml

    config = proxy_config(upstream)
    config["model_list"][0]["litellm_params"]["api_key"] = "os.environ/TEST_UPSTREAM_KEY"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    os.environ["TEST_UPSTREAM_KEY"] = "sk-from-environment-123456"
    netlog = tmp_path / "net.log"
    with held_port() as port:
        process = start(
            ["--config", str(path), "--host", "127.0.0.1", "--port", str(port)], netlog, tmp_path
        )
        try:
            wait_ready(f"http://127.0.0.1:{port}", process)
            sdk = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
            reply = sdk.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "yo"}]
            )
            assert reply.choices[0].message.content == "echo: yo"
        finally:
            stop(process)
            del os.environ["TEST_UPSTREAM_KEY"]
        received = upstream.chat_requests()[-1]
        assert received.headers["authorization"] == "Bearer sk-from-environment-123456"
        assert not netlog.exists() or netlog.read_text() == ""


def test_invalid_config_fails_at_start_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("context:\n  budget_ratio: 3\n")
    result = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "serve", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "context.budget_ratio" in result.stderr


def test_sigterm_drains_within_the_grace_period(tmp_path: Path, upstream: FakeUpstream) -> None:
    """A stream that would run for half a minute does not hold the process: SIGTERM stops
    new connections, gives requests in flight `shutdown_grace_seconds`, then ends them."""
    import signal
    import threading

    import yaml

    config = proxy_config(upstream, server={"shutdown_grace_seconds": 1})
    config["session"] = {"path": str(tmp_path / "sessions")}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    upstream.hung_up = 0
    upstream.queue(Reply(content="a b c d", stall_seconds=30, stall_after_chunks=2))
    with held_port() as port:
        process = start(
            ["--config", str(path), "--port", str(port)], tmp_path / "net.log", tmp_path
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, process)
            began = threading.Event()

            def client() -> None:
                body = {
                    "model": MODEL,
                    "messages": [{"role": "user", "content": "hi"}],
                    "stream": True,
                }
                with (
                    contextlib.suppress(httpx.HTTPError),
                    httpx.stream(
                        "POST", url + "/v1/chat/completions", json=body, timeout=60
                    ) as response,
                ):
                    for _ in response.iter_lines():
                        began.set()

            thread = threading.Thread(target=client, daemon=True)
            thread.start()
            assert began.wait(30), "the stream began"
            stopped = time.monotonic()
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=20)
            assert time.monotonic() - stopped < 10  # the grace of 1 s, then shutdown
            # uvicorn re-raises the signal once it has shut down cleanly.
            assert process.returncode in (0, -signal.SIGTERM)
            output = process.stdout.read().decode() if process.stdout else ""
            assert "graceful shutdown exceeded" in output and "Finished server process" in output
            thread.join(timeout=10)
            assert not thread.is_alive(), "the client's stream was ended"
        finally:
            if process.poll() is None:
                process.kill()
    eventually(lambda: upstream.hung_up == 1, "the upstream call to be cancelled", 5)
