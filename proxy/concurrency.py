"""Python work on a request's messages, kept from holding the event loop: run in a
worker thread when they are many or large, and a pause between two passes over a large
body (each pass is one C call that holds the loop for its whole length); a loop over a
stream's events given back to the others every few ms (`Turns`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "MANY_ITEMS",
    "MANY_MESSAGES",
    "SLICE",
    "Turns",
    "elsewhere",
    "many",
    "off_loop",
    "pause",
    "sized",
]

T = TypeVar("T")

# Python work on more messages than this (a long conversation's first request stores
# all of it) runs in a worker thread rather than on the event loop.
MANY_MESSAGES = 256
# Python work on texts longer than this (characters) runs in a worker thread, as on
# more than MANY_MESSAGES messages.
_OFF_LOOP_CHARS = 50_000
_PAUSE_BYTES = 256 * 1024  # bodies above this yield to other requests between passes
# A request's list of more items than this (tools, system blocks) is checked and
# translated in a worker thread: an adversary's, or a mistake (agents send dozens).
MANY_ITEMS = 1_000
# The longest a loop over a stream's events holds the event loop (seconds): a request
# that arrives meanwhile waits about two of these (accepted, then answered).
SLICE = 0.02


async def pause(size: int) -> None:
    """Let other requests run between two passes over a large body (each pass is one C
    call that holds the event loop for its whole length)."""
    if size > _PAUSE_BYTES:
        await asyncio.sleep(0)


async def off_loop(messages: list[Any], work: Any, body: int | None = None) -> Any:
    """Run `work` (Python work on `messages`) here, or in a worker thread when they are
    many or large: there the interpreter switches to the event loop every few ms.
    `body`, the size of the request they came in, spares measuring them when small."""
    if len(messages) > MANY_MESSAGES:
        return await asyncio.to_thread(work)
    if body is not None and body <= _OFF_LOOP_CHARS:
        return work()
    size = sum(len(str(m.get("content") or "")) for m in messages if isinstance(m, dict))
    return await sized(size, work)


async def sized(size: int, work: Callable[[], T]) -> T:
    """`work`, Python work on `size` characters (or bytes) of text: here, or in a worker
    thread when they are many."""
    return await elsewhere(size > _OFF_LOOP_CHARS, work)


async def elsewhere(large: bool, work: Callable[[], T]) -> T:
    """`work` in a worker thread where it is `large`, else here (a thread's hop costs
    more than small work)."""
    return await asyncio.to_thread(work) if large else work()


def many(*items: Any) -> bool:
    """Whether any of `items` is a list of more than `MANY_ITEMS` (a request's tools or
    system blocks, say)."""
    return any(isinstance(found, list) and len(found) > MANY_ITEMS for found in items)


class Turns:
    """Turns on the event loop for a loop that may never wait: a stream whose bytes are
    all there already is read, framed and written without one `await` that suspends,
    and would hold the loop from every other request to its end. `taken` gives the loop
    back once this one has held it `SLICE` seconds since it last did."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since = time.monotonic()

    async def taken(self) -> None:
        if time.monotonic() - self._since >= SLICE:
            await asyncio.sleep(0)
            self._since = time.monotonic()
