"""Redis Cluster for tests: three `redis-server --cluster-enabled yes` nodes on loopback,
joined by `redis-cli --cluster create`, each in a temporary directory of its own."""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from proxy.local import free_port


@contextmanager
def redis_cluster(nodes: int = 3) -> Iterator[str]:
    """Yields a `redis_url` for the cluster (any node's address, `?cluster=true`)."""
    with tempfile.TemporaryDirectory(prefix="redis-cluster-") as directory, ExitStack() as stack:
        ports = [free_port() for _ in range(nodes)]
        for port in ports:
            stack.enter_context(_node(Path(directory), port))
        addresses = [f"127.0.0.1:{port}" for port in ports]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0"],
            input="yes\n",
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        _wait_until_ok(ports)
        yield f"redis://127.0.0.1:{ports[0]}/0?cluster=true"


@contextmanager
def _node(directory: Path, port: int) -> Iterator[None]:
    home = directory / str(port)
    home.mkdir()
    command = [
        "redis-server",
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--cluster-enabled", "yes",
        "--cluster-port", str(free_port()),  # the default, port + 10000, may not exist
        "--cluster-config-file", str(home / "nodes.conf"),
        "--dir", str(home),
        "--save", "",
        "--appendonly", "no",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while _cli(port, "ping") != "PONG":
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {port} did not start")
            time.sleep(0.05)
        yield
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait_until_ok(ports: list[int]) -> None:
    deadline = time.monotonic() + 60
    while not all("cluster_state:ok" in _cli(port, "cluster", "info") for port in ports):
        if time.monotonic() > deadline:
            raise RuntimeError("the Redis cluster did not become ready")
        time.sleep(0.1)


def _cli(port: int, *command: str) -> str:
    done = subprocess.run(
        ["redis-cli", "-p", str(port), *command], capture_output=True, text=True, timeout=10
    )
    return done.stdout.strip()
