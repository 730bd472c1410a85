"""Redis for tests, started by the tests themselves on loopback ports they hold: one
server, and a Redis Cluster of three `redis-server --cluster-enabled yes` nodes joined
by `redis-cli --cluster create`, each in a temporary directory of its own."""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from proxy.cli.local import held_port


@contextmanager
def redis_server() -> Iterator[str]:
    """Yields a `redis_url` for a server of its own (no persistence)."""
    with held_port() as port, redis_on(port):
        yield f"redis://127.0.0.1:{port}/0"


@contextmanager
def redis_on(port: int) -> Iterator[Callable[[], None]]:
    """A redis-server (no persistence) on `port` until the block ends; yields a function
    that stops it sooner (a test of a store that goes away)."""
    with tempfile.TemporaryDirectory(prefix="redis-") as directory:
        command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", directory]
        with _running([*command, "--save", "", "--appendonly", "no"], port) as stop:
            yield stop


@contextmanager
def redis_cluster(nodes: int = 3) -> Iterator[str]:
    """Yields a `redis_url` for the cluster (any node's address, `?cluster=true`)."""
    with tempfile.TemporaryDirectory(prefix="redis-cluster-") as directory, ExitStack() as stack:
        ports = [stack.enter_context(held_port()) for _ in range(nodes)]
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
    with held_port() as bus:  # the default, port + 10000, may not exist
        command = [
            "redis-server",
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--cluster-enabled", "yes",
            "--cluster-port", str(bus),
            "--cluster-config-file", str(home / "nodes.conf"),
            "--dir", str(home),
            "--save", "",
            "--appendonly", "no",
        ]  # fmt: skip
        with _running(command, port):
            yield


@contextmanager
def _running(command: list[str], port: int) -> Iterator[Callable[[], None]]:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop() -> None:
        process.terminate()
        process.wait(timeout=10)

    try:
        deadline = time.monotonic() + 30
        while _cli(port, "ping") != "PONG":
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {port} did not start")
            time.sleep(0.05)
        yield stop
    finally:
        stop()


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
