"""Waiting on a condition, with a deadline, rather than sleeping a fixed time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

INTERVAL = 0.02


def eventually(condition: Callable[[], object], what: str, seconds: float = 10) -> None:
    """Return once `condition()` is true; fail naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {seconds:.0f}s waiting for {what}"
        time.sleep(INTERVAL)


async def eventually_async(
    condition: Callable[[], Awaitable[object]], what: str, seconds: float = 10
) -> None:
    """`eventually` for a condition that must be awaited."""
    deadline = time.monotonic() + seconds
    while not await condition():
        assert time.monotonic() < deadline, f"timed out after {seconds:.0f}s waiting for {what}"
        await asyncio.sleep(INTERVAL)
