"""Loaded into subprocesses under test: refuses and records any non-loopback connection.

Set TEST_NETWORK_LOG to a file; every attempt to reach another host is
appended there and fails at once, so a test can assert the file stays empty.
"""

import ipaddress
import os
import socket

_LOG = os.environ.get("TEST_NETWORK_LOG", "")
_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex
_getaddrinfo = socket.getaddrinfo


def _loopback(host: object) -> bool:
    if host in ("localhost", "", None) or isinstance(host, bytes | int):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _refuse(what: str) -> None:
    if _LOG:
        with open(_LOG, "a", encoding="utf-8") as log:
            log.write(what + "\n")
    raise OSError(101, f"network disabled in tests: {what}")


def _guarded_connect(self: socket.socket, address: object) -> None:
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0]):  # type: ignore[index]
        _refuse(f"connect {address}")
    return _connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: object) -> int:
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0]):  # type: ignore[index]
        _refuse(f"connect {address}")
    return _connect_ex(self, address)


def _guarded_getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
    if not _loopback(host):
        _refuse(f"resolve {host}")
    return _getaddrinfo(host, *args, **kwargs)


if _LOG:
    socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = _guarded_getaddrinfo  # type: ignore[assignment]
