"""The heap is trimmed every INTERVAL seconds, off the event loop, for as long as the
task runs; and on this machine's glibc there is a trim to call."""

from __future__ import annotations

import asyncio
import threading

import pytest

from proxy.http import heap


async def test_the_heap_is_trimmed_off_the_loop_until_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(heap, "INTERVAL", 0.01)
    loop_thread = threading.get_ident()
    trims: list[int] = []
    task = asyncio.get_running_loop().create_task(
        heap.trimming(lambda: trims.append(threading.get_ident()))
    )
    for _ in range(500):  # 5 s at most
        if len(trims) >= 3:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    assert len(trims) >= 3
    assert loop_thread not in trims
    count = len(trims)
    await asyncio.sleep(0.05)
    assert len(trims) == count


def test_glibc_can_trim_here() -> None:
    """The machine's libc is glibc (Debian's): the trimmer is not a no-op here."""
    assert heap._malloc_trim() is not None
