"""Giving the heap back: glibc's malloc keeps what a large request freed (a 5 MB body, a
24 MB reply) for the process to reuse, in pieces between what is still live, so a proxy
that once served a few such requests stays that large. After the issue 51 fuzz the
proxy held 1.9 times its fresh size this way; `malloc_trim` gave all but a sixth of the
growth back. So the heap is trimmed every `INTERVAL` seconds, in a worker thread: a few
tens of milliseconds when hundreds of MB are free, a fraction of one when nothing is.
Nothing on a libc other than glibc."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
from collections.abc import Callable

__all__ = ["INTERVAL", "trimming"]

INTERVAL = 10.0  # seconds between trims


async def trimming(trim: Callable[[], object] | None = None) -> None:
    """Trim the heap every `INTERVAL` seconds, for as long as the task runs (the app's
    lifespan)."""
    trim = trim if trim is not None else _malloc_trim()
    if trim is None:
        return  # not glibc: nothing to do
    while True:
        await asyncio.sleep(INTERVAL)
        await asyncio.to_thread(trim)


def _malloc_trim() -> Callable[[], object] | None:
    with contextlib.suppress(OSError, AttributeError):
        trim = ctypes.CDLL("libc.so.6").malloc_trim
        return lambda: trim(0)
    return None
