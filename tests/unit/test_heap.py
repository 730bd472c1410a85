"""The heap is trimmed every INTERVAL seconds, off the event loop, for as long as the
task runs; and on this machine's glibc there is a trim to call."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref

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


class _Cycle:
    """Garbage only the collector frees: it refers to itself."""

    def __init__(self, size: int) -> None:
        self.me = self
        self.data = bytearray(b"\x01") * size  # written: resident at once (calloc is not)


async def _ticks(
    monkeypatch: pytest.MonkeyPatch, growth: int, ticks: int = 5
) -> tuple[bool, list[None]]:
    """Whether a 16 MiB cycle made after the trimmer started outlived `ticks` ticks with
    `growth` as the trimmer's `GROWTH` (the automatic collector off meanwhile), and the
    trims made."""
    monkeypatch.setattr(heap, "INTERVAL", 0.01)
    monkeypatch.setattr(heap, "GROWTH", growth)
    trims: list[None] = []
    gc.collect()
    # Free pages still resident (other tests' garbage) would take the cycle without the
    # process growing; given back first, the cycle's pages are new.
    trim = heap._malloc_trim()
    assert trim is not None
    trim()
    gc.disable()
    try:
        task = asyncio.get_running_loop().create_task(heap.trimming(lambda: trims.append(None)))
        await asyncio.sleep(0)  # the trimmer reads its floor before the cycle is made
        alive = weakref.ref(_Cycle(16 << 20))
        for _ in range(500):  # 5 s at most
            if len(trims) >= ticks or alive() is None:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        return alive() is not None, trims
    finally:
        gc.enable()
        gc.collect()


async def test_a_process_grown_by_garbage_collects_it(monkeypatch: pytest.MonkeyPatch) -> None:
    survived, trims = await _ticks(monkeypatch, growth=4 << 20)
    assert not survived
    assert len(trims) <= 2  # at the first tick after the cycle was made


async def test_a_process_that_has_not_grown_is_not_collected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    survived, trims = await _ticks(monkeypatch, growth=1 << 40)
    assert survived
    assert len(trims) >= 5


class _Read(Exception):
    """Every size the test gives has been read."""


async def test_the_floor_is_where_a_collection_left_the_process_or_the_least_since(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tick that collected sets the floor where it left the process; one that did not
    lowers it to the least seen, so garbage made after memory was given back counts."""
    monkeypatch.setattr(heap, "INTERVAL", 0.001)
    grown = heap.GROWTH
    # At the start, then each tick: the size checked, and the size after the trim.
    sizes = [100, 100, 50, 50 + grown + 1, 60, 60 + grown, 60 + grown, 60 + grown + 1]
    read = iter(sizes)

    def size() -> int:
        for value in read:
            return value
        raise _Read

    collections: list[int] = []
    with pytest.raises(_Read):
        await heap.trimming(lambda: None, lambda: collections.append(1), size)
    # tick 1: no (floor 50 after); tick 2: 50+G+1 collects (floor 60); tick 3: 60+G is
    # not more than GROWTH over 60; tick 4: 60+G+1 collects.
    assert len(collections) == 2
