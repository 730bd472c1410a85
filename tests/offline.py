"""A command run with no network at all but one port of this host's loopback.

`offline(command, port)` runs `command` in a network namespace of its own (`unshare
--net`, as root): its loopback is up and nothing else exists, so any attempt to reach
another host (a model catalogue, an update check, telemetry) fails at once, as on a
machine without internet. Its 127.0.0.1:`port` is bridged, through a Unix socket (the
file system is shared, the network is not), to the same port here: the proxy under test.

Run as a script, this file is the namespace's side: it brings the loopback up, listens on
the port, and runs the command.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def offline(
    command: list[str], port: int, env: dict[str, str], cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """`command` run where only 127.0.0.1:`port` (this host's) can be reached."""
    with _bridged(port) as path:
        inside = ["unshare", "--net", sys.executable, __file__, str(port), path, *command]
        process = subprocess.Popen(
            inside,
            env=env | {"PWD": str(cwd)},  # what some programs take for their directory
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a group of its own: ended whole if it overruns
        )
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            err += f"\n(killed after {timeout} s)"
        return subprocess.CompletedProcess(inside, process.returncode, out, err)


@contextlib.contextmanager
def _bridged(port: int) -> Iterator[str]:
    """A Unix socket whose every connection is piped to 127.0.0.1:`port`."""
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "bridge")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(64)
        threading.Thread(
            target=_serve, args=(listener, lambda: socket.create_connection(("127.0.0.1", port)))
        ).start()
        try:
            yield path
        finally:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()


def _serve(listener: socket.socket, connect: Callable[[], socket.socket]) -> None:
    """Accept until the listener closes; pipe each connection to a new one of `connect`."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        try:
            server = connect()
        except OSError:
            client.close()
            continue
        for source, sink in ((client, server), (server, client)):
            threading.Thread(target=_pipe, args=(source, sink), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(probe, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))


def _main(port: int, path: str, command: list[str]) -> int:
    _loopback_up()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)

    def connect() -> socket.socket:
        bridge = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        bridge.connect(path)
        return bridge

    threading.Thread(target=_serve, args=(listener, connect), daemon=True).start()
    return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(_main(int(sys.argv[1]), sys.argv[2], sys.argv[3:]))
