"""Run the proxy on a real loopback socket: an ASGI app in a background thread, or
`context-proxy serve` as a process of its own, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from proxy.cli.local import serve_in_background as serve

__all__ = ["DEPLOY_PYTHON", "guarded_env", "proxy_command", "serve", "start", "stop", "wait_ready"]

NONET = Path(__file__).resolve().parent / "nonet"
# The proxy as users install it: `tests/install.sh` builds this venv from
# deploy/requirements.lock alone (the Quick start's line), so a proxy process that imports
# what the deploy lock lacks fails here, not on a user's machine.
DEPLOY_PYTHON = Path(__file__).resolve().parent.parent / ".venv-deploy" / "bin" / "python"


def proxy_command(*args: str) -> list[str]:
    """`context-proxy ARGS` as the deploy install runs it."""
    if not DEPLOY_PYTHON.is_file():
        raise AssertionError(f"{DEPLOY_PYTHON} is missing: the README's test command builds it")
    return [str(DEPLOY_PYTHON), "-m", "proxy.cli", *args]


def guarded_env(netlog: Path) -> dict[str, str]:
    """An environment whose Python processes refuse, and log to `netlog`, every
    connection to another host (`tests/nonet/sitecustomize.py`)."""
    return os.environ | {
        "PYTHONPATH": os.pathsep.join([str(NONET), os.environ.get("PYTHONPATH", "")]),
        "TEST_NETWORK_LOG": str(netlog),
    }


def start(
    args: list[str], netlog: Path, cwd: Path, wrapper: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """`context-proxy serve` with `args` as a process of its own (run by `wrapper`, a
    command that ends by executing its arguments, if given)."""
    env = guarded_env(netlog)
    env.pop("LITELLM_LOCAL_MODEL_COST_MAP", None)  # the proxy must set it itself
    env.pop("TIKTOKEN_CACHE_DIR", None)
    command = [*wrapper, *proxy_command("serve", *args)]
    return subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def wait_ready(
    url: str, process: subprocess.Popen[bytes], limit: float = 60, probe: str = "/health/ready"
) -> float:
    """Seconds until `probe` answers 200 (`/health/live`: until the process serves)."""
    began = time.monotonic()
    while time.monotonic() - began < limit:
        assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
        try:
            if httpx.get(url + probe, timeout=1).status_code == 200:
                return time.monotonic() - began
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("proxy did not become ready")


def stop(process: subprocess.Popen[bytes]) -> str:
    process.terminate()
    try:
        output, _ = process.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    return output.decode() if output else ""
