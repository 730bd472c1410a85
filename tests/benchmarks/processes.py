"""The processes a benchmark talks to, each in its own process on loopback.

The test upstream, context-proxy (`context-proxy serve`), and LiteLLM's own proxy,
installed on first use into a virtualenv of its own (`litellm[proxy]` at the version
this project pins) so that it never mixes with the project's environment.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import subprocess
import sys
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from proxy.cli.local import held_port, running_server
from tests.benchmarks.conversations import MODEL
from tests.servers import proxy_command, stop, wait_ready

_ROOT = Path(__file__).resolve().parents[2]
# LiteLLM's proxy's virtualenv and pip's cache: in the checkout, never in `~`.
CACHE = _ROOT / ".cache" / "benchmarks"
PIP_LOCK = _ROOT / "tests" / "pip.lock"
UPSTREAM_KEY = "sk-bench-upstream"
# Large enough that no benchmark body is ever compressed: proxy and direct calls then
# carry the same messages, and the difference is the proxy's own time.
HUGE_WINDOW = 4_000_000


def model_list(upstream_url: str, max_input_tokens: int = HUGE_WINDOW) -> list[dict[str, Any]]:
    return [
        {
            "model_name": MODEL,
            "litellm_params": {
                "model": "openai/gpt-4o-mini",
                "api_base": upstream_url,
                "api_key": UPSTREAM_KEY,
            },
            "model_info": {"max_input_tokens": max_input_tokens},
        }
    ]


@contextmanager
def upstream(faults: bool = False) -> Iterator[str]:
    """The test upstream in its own process; yields its `/v1` base URL. With `faults`,
    messages ask it for errors, stalls and cut streams (`upstream_server`)."""
    with held_port() as port:
        command = [sys.executable, "-m", "tests.benchmarks.upstream_server", str(port)]
        command += ["--faults"] if faults else []
        url = f"http://127.0.0.1:{port}/v1"
        with running_server(command, url + "/models", cwd=_ROOT):
            yield url


@contextmanager
def hostile_upstream() -> Iterator[str]:
    """The fuzz benchmark's upstream (`fuzz_upstream`: the test upstream, hostile where a
    request asks it to be) in its own process; yields its `/v1` base URL."""
    with held_port() as port:
        command = [sys.executable, "-m", "tests.benchmarks.fuzz_upstream", str(port)]
        url = f"http://127.0.0.1:{port}/v1"
        with running_server(command, url + "/models", cwd=_ROOT):
            yield url


@contextmanager
def deployed_proxy(
    config: dict[str, Any], directory: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """`context-proxy serve` as users install it (`.venv-deploy`: its malloc settings,
    one worker) with `config`; yields its URL, its process and the file its output
    goes to."""
    config = {**config, "session": {"path": str(directory / "sessions")}}
    path = directory / "context-proxy.yaml"
    path.write_text(yaml.safe_dump(config))
    log = directory / "context-proxy.log"
    with held_port() as port, log.open("wb") as output:
        command = proxy_command("serve", "--config", str(path), "--port", str(port))
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=_ROOT)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, process)
            yield url, process, log
        finally:
            stop(process)


@contextmanager
def context_proxy(config: dict[str, Any], directory: Path) -> Iterator[str]:
    """`context-proxy serve` with `config` (one worker); yields its base URL."""
    with context_proxy_process(config, directory) as (url, _):
        yield url


@contextmanager
def context_proxy_process(
    config: dict[str, Any], directory: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`context-proxy serve` with `config` (one worker), as users install it (the deploy
    lock's venv: what is timed is what they run); yields its URL and process."""
    with held_port() as port:
        config = {
            **config,
            "session": {"path": str(directory / "sessions"), **config.get("session", {})},
        }
        path = directory / "context-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        command = proxy_command("serve", "--config", str(path), "--port", str(port))
        url = f"http://127.0.0.1:{port}"
        with running_server(command, url + "/health/ready", cwd=_ROOT, env=_quiet_env()) as process:
            yield url, process


@contextmanager
def litellm_proxy(config: dict[str, Any], directory: Path) -> Iterator[str]:
    """LiteLLM's proxy (one worker) on the same config; yields its base URL."""
    with litellm_proxy_process(config, directory) as (url, _):
        yield url


@contextmanager
def litellm_proxy_process(
    config: dict[str, Any], directory: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """LiteLLM's proxy (one worker) on the same config; yields its base URL and process."""
    executable = litellm_proxy_executable()
    with held_port() as port:
        path = directory / "litellm.yaml"
        path.write_text(yaml.safe_dump(config))
        command = [str(executable), "--config", str(path), "--host", "127.0.0.1"]
        command += ["--port", str(port), "--num_workers", "1"]
        url = f"http://127.0.0.1:{port}"
        health = url + "/health/liveliness"
        with running_server(command, health, seconds=180, env=_quiet_env()) as process:
            yield url, process


def litellm_proxy_executable() -> Path:
    """`litellm` from a virtualenv holding `litellm[proxy]` at our pinned version, every
    package as `litellm-proxy.lock` pins and hashes it (a changed lock installs anew).
    The virtualenv and pip's cache live in the checkout's `.cache/`, never in `~`."""
    version = importlib.metadata.version("litellm")
    lock = Path(__file__).with_name("litellm-proxy.lock")
    if f"\nlitellm=={version} " not in lock.read_text():
        raise RuntimeError(f"{lock.name} does not pin litellm=={version}, as pyproject does")
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()[:12]
    home = CACHE / f"litellm-proxy-{version}-{digest}"
    executable = home / "bin" / "litellm"
    if executable.is_file():
        return executable
    print(f"installing litellm[proxy]=={version} into {home} (once)", file=sys.stderr)
    venv.create(home, with_pip=True, clear=True)
    pip = [str(home / "bin" / "python"), "-m", "pip", "install", "-q", "--require-hashes"]
    env = {**os.environ, "PIP_CACHE_DIR": str(CACHE / "pip")}
    # The venv's own pip first: the one Python ships may refuse the lock's extras.
    for requirements in (PIP_LOCK, lock):
        done = subprocess.run(
            [*pip, "-r", str(requirements)], capture_output=True, text=True, env=env
        )
        if done.returncode:
            raise RuntimeError(f"installing {requirements.name} failed:\n{done.stderr[-3000:]}")
    return executable


def _quiet_env() -> dict[str, str]:
    """No network at start-up for either proxy (LiteLLM's bundled model map)."""
    return {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
