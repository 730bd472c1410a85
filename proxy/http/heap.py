"""Giving the heap back: glibc's malloc keeps what a large request freed (a 5 MB body, a
24 MB reply) for the process to reuse, in pieces between what is still live, so a proxy
that once served a few such requests stays that large. After the issue 51 fuzz the
proxy held 1.9 times its fresh size this way; `malloc_trim` gave all but a sixth of the
growth back. So the heap is trimmed every `INTERVAL` seconds, in a worker thread: a few
tens of milliseconds when hundreds of MB are free, a fraction of one when nothing is.
Nothing on a libc other than glibc.

Memory that only the garbage collector frees is not free to trim. A failed upstream call
leaves a cycle (its exception, the traceback, the frames, LiteLLM's logging object) that
holds what the call read, a 24 MB reply and the 96 MB of error text made of it; and the
app collects the oldest generation almost never (`gc.set_threshold`: parsing a long
conversation is tens of thousands of young containers). After the issue 51 fuzz's
first 57 cases such cycles held 630 MB, twice the fresh size, 10 s after them. So a tick
at which the process has grown by `GROWTH` since the last full collection collects fully
first (on the event loop, where finalizers may touch it; a few milliseconds, `gc.freeze` keeps
LiteLLM's module data out of it), then trims."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import os
from collections.abc import Callable

__all__ = ["GROWTH", "INTERVAL", "resident", "trimming"]

INTERVAL = 10.0  # seconds between trims
GROWTH = 64 << 20  # resident bytes gained since the last full collection that call for one


async def trimming(
    trim: Callable[[], object] | None = None,
    collect: Callable[[], object] = gc.collect,
    size: Callable[[], int] | None = None,
) -> None:
    """Trim the heap every `INTERVAL` seconds, for as long as the task runs (the app's
    lifespan); collect the garbage fully first when the process has grown by `GROWTH`
    since the last full collection (or the least it was since)."""
    trim = trim if trim is not None else _malloc_trim()
    if trim is None:
        return  # not glibc: nothing to do
    size = size if size is not None else resident
    floor = size()
    while True:
        await asyncio.sleep(INTERVAL)
        collected = size() - floor > GROWTH
        if collected:
            collect()
        await asyncio.to_thread(trim)
        floor = size() if collected else min(floor, size())


def resident() -> int:
    """The process's resident memory, bytes (0 where /proc does not say)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _malloc_trim() -> Callable[[], object] | None:
    with contextlib.suppress(OSError, AttributeError):
        trim = ctypes.CDLL("libc.so.6").malloc_trim
        return lambda: trim(0)
    return None
