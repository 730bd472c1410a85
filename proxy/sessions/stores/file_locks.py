"""The disk store's turn locks: one byte of a lock file per session, locked with an
open-file-description lock (Linux `F_OFD_SETLK`).

Taking and giving back a lock is one system call each (about 2 µs here, where a row in
SQLite cost two write transactions, about 0.1 ms a turn); it is held by this store's
open file, so two stores conflict even within one process; and the kernel drops it
when the process holding it dies, so it needs no expiry and no renewal.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import struct
from pathlib import Path

__all__ = ["FileLocks"]

_FLOCK = "hhqqixxxx"  # struct flock: type, whence, start, len, pid (0 for OFD locks)


class FileLocks:
    def __init__(self, path: Path) -> None:
        self._descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self._held: dict[int, str] = {}  # byte -> the token it is held by

    def acquire(self, key: str, token: str) -> bool:
        """Lock `key`'s byte for `token`; False if it is held (by anyone, this store too)."""
        byte = _byte(key)
        if byte in self._held:
            return False
        try:
            self._lock(fcntl.F_WRLCK, byte)
        except (BlockingIOError, PermissionError):  # EAGAIN / EACCES: another holds it
            return False
        self._held[byte] = token
        return True

    def holds(self, key: str, token: str) -> bool:
        return self._held.get(_byte(key)) == token

    def held_by_another(self, key: str, token: str) -> bool:
        """Whether `key`'s byte is held, not by `token`: by this store for another token,
        or by another open file (asked of the kernel, taking nothing)."""
        byte = _byte(key)
        if byte in self._held:
            return self._held[byte] != token
        request = struct.pack(_FLOCK, fcntl.F_WRLCK, 0, byte, 1, 0)
        answer = fcntl.fcntl(self._descriptor, fcntl.F_OFD_GETLK, request)
        return struct.unpack(_FLOCK, answer)[0] != fcntl.F_UNLCK

    def release(self, key: str, token: str) -> None:
        """Unlock `key`'s byte if `token` holds it."""
        byte = _byte(key)
        if self._held.get(byte) == token:
            self._lock(fcntl.F_UNLCK, byte)
            del self._held[byte]

    def close(self) -> None:
        os.close(self._descriptor)  # the kernel drops every lock still held

    def _lock(self, kind: int, byte: int) -> None:
        fcntl.fcntl(self._descriptor, fcntl.F_OFD_SETLK, struct.pack(_FLOCK, kind, 0, byte, 1, 0))


def _byte(key: str) -> int:
    """A byte offset for a key, from 62 bits of its hash: two sessions share one only by
    a collision that would make them wait for each other, never share their data."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest()) >> 2
