"""A proxy process whose disk store lives on a small disk of its own: a tmpfs mounted in
a user and mount namespace (`unshare`, no root needed), which a test can fill, free, or
start read-only and then make writable, while the proxy runs."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.servers import start, stop

# Mount a tmpfs of $1 bytes on $2, read-only unless $3 is "rw"; then run the rest.
_MOUNT = (
    'mount -t tmpfs -o size="$1",mode=0700 tmpfs "$2"'
    ' && { [ "$3" = rw ] || mount -o remount,ro "$2"; }'
    ' && shift 3 && exec "$@"'
)
_CHUNK = 1 << 16


@dataclass
class SmallDisk:
    process: subprocess.Popen[bytes]
    mount: Path  # where the proxy sees its disk
    size: int

    @property
    def seen_from_here(self) -> Path:
        """The disk as this process reaches it: through the proxy's own root."""
        return Path(f"/proc/{self.process.pid}/root") / self.mount.relative_to("/")

    def fill(self) -> None:
        """Write a ballast file until the disk has no byte left (never more than its
        size, and only once it is certain this is the small disk)."""
        stats = os.statvfs(self.seen_from_here)
        assert stats.f_blocks * stats.f_frsize == self.size, "not the small disk"
        chunk = b"\0" * _CHUNK
        with open(self.seen_from_here / "ballast", "ab") as ballast:
            for _ in range(self.size // _CHUNK + 2):
                try:
                    ballast.write(chunk)
                    ballast.flush()
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    return
        raise AssertionError("the small disk did not fill up")

    def free(self) -> None:
        (self.seen_from_here / "ballast").unlink()

    def make_writable(self) -> None:
        enter = ["nsenter", "--target", str(self.process.pid), "--user", "--mount"]
        remount = ["mount", "-o", "remount,rw", str(self.mount)]
        subprocess.run([*enter, "--preserve-credentials", *remount], check=True)


@contextlib.contextmanager
def proxy_on_small_disk(
    args: list[str], directory: Path, size: int, writable: bool = True
) -> Iterator[SmallDisk]:
    """`context-proxy serve` with `args`, its disk (`directory/disk`) a tmpfs of `size`
    bytes; the process's output is printed when it stops."""
    mount = directory / "disk"
    mount.mkdir()
    wrapper = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", _MOUNT, "sh"]
    wrapper += [str(size), str(mount), "rw" if writable else "ro"]
    process = start(args, directory / "net.log", directory, wrapper)
    try:
        yield SmallDisk(process, mount, size)
    finally:
        print(stop(process))
