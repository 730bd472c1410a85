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
import pytest

from proxy.cli.local import held_port
from tests.proxies import MODEL, proxy_config
from tests.servers import guarded_env, proxy_command, start, stop, wait_ready
from tests.upstream import FakeUpstream, Reply
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]

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


def _environment(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(pair.decode().split("=", 1) for pair in pairs if b"=" in pair)


@pytest.mark.parametrize("given", [None, "pymalloc"])
def test_serve_runs_with_the_system_malloc_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str | None
) -> None:
    """`serve` gives Python's small objects to glibc's malloc, whose free pages the heap
    trimmer can give back (pymalloc's arenas kept the fuzz's process at 1.7 times its
    fresh size); it runs itself again to do so, as the same process, so a supervisor
    that started it still holds what serves. An operator's PYTHONMALLOC stands."""
    if given is None:
        monkeypatch.delenv("PYTHONMALLOC", raising=False)
    else:
        monkeypatch.setenv("PYTHONMALLOC", given)
    with held_port() as port:
        process = start(["--port", str(port)], tmp_path / "net.log", tmp_path)
        try:
            wait_ready(f"http://127.0.0.1:{port}", process)
            assert _environment(process.pid)["PYTHONMALLOC"] == (given or "malloc")
        finally:
            stop(process)


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
        proxy_command("serve", "--config", str(path)),
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


def cli(*args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTEXT_PROXY_")}
    if key is not None:
        env["CONTEXT_PROXY_KEY"] = key
    return subprocess.run(
        proxy_command(*args),
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_version_is_the_installed_release() -> None:
    import importlib.metadata
    import tomllib

    done = cli("--version")
    assert done.returncode == 0
    release = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert importlib.metadata.version("context-proxy") == release
    assert done.stdout.strip() == f"context-proxy {release}"


def test_sessions_list_show_and_delete_against_a_running_proxy(
    upstream: FakeUpstream, start_proxy
) -> None:
    from tests.integration.test_auth import ADMIN, KEY_A, KEY_B, KEYS

    url = start_proxy(proxy_config(upstream, auth=KEYS))
    for key, session, turns in ((KEY_A, "cli-demo", 3), (KEY_B, "cli-other", 1)):
        sdk = openai.OpenAI(
            base_url=url + "/v1",
            api_key=key,
            max_retries=0,
            default_headers={"X-Session-Id": session},
        )
        history: list[dict[str, str]] = []
        for turn in range(turns):
            history.append({"role": "user", "content": f"turn {turn}"})
            reply = sdk.chat.completions.create(model=MODEL, messages=history)
            history.append({"role": "assistant", "content": reply.choices[0].message.content})

    listed = cli("sessions", "--url", url, "list", key=KEY_A)
    assert listed.returncode == 0, listed.stderr
    assert "cli-demo" in listed.stdout and "cli-other" not in listed.stdout
    everyone = cli("sessions", "--url", url, "--key", ADMIN, "list")
    assert "cli-demo" in everyone.stdout and "cli-other" in everyone.stdout

    shown = cli("sessions", "--url", url, "show", "cli-demo", key=KEY_A)
    assert shown.returncode == 0, shown.stderr
    assert "messages  6, summaries 0" in shown.stdout
    turns = [line.split() for line in shown.stdout.splitlines() if line[:7].strip().isdigit()]
    assert [row[1] for row in turns] == ["none"] * 3  # version, compression, sent, …
    assert "system" in shown.stdout and "window" in shown.stdout

    # Another tenant's key cannot delete it: one line, the proxy's own words.
    refused = cli("sessions", "--url", url, "delete", "cli-demo", key=KEY_B)
    assert refused.returncode == 1
    assert refused.stderr == "context-proxy: 404: No session `cli-demo`.\n"
    deleted = cli("sessions", "--url", url, "delete", "cli-demo", key=KEY_A)
    assert deleted.returncode == 0 and deleted.stdout == "deleted cli-demo\n"
    gone = httpx.get(url + "/v1/sessions/cli-demo", headers={"Authorization": f"Bearer {KEY_A}"})
    assert gone.status_code == 404

    keyless = cli("sessions", "--url", url, "list")
    assert keyless.returncode == 1 and keyless.stderr.startswith("context-proxy: 401: Missing")
    away = cli("sessions", "--url", "http://127.0.0.1:9", "list", key=KEY_A)
    assert away.returncode == 1 and len(away.stderr.splitlines()) == 1
    assert "cannot reach http://127.0.0.1:9" in away.stderr
