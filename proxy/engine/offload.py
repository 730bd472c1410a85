"""Python work on a request's messages, kept from holding the event loop: run in a
worker thread when they are many or large, and a pause between two passes over a large
body (each pass is one C call that holds the loop for its whole length)."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.sessions.records import MANY_MESSAGES

__all__ = ["off_loop", "pause"]

# Python work on texts longer than this (characters) runs in a worker thread, as on
# more than MANY_MESSAGES messages.
_OFF_LOOP_CHARS = 50_000
_PAUSE_BYTES = 256 * 1024  # bodies above this yield to other requests between passes


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
    if size > _OFF_LOOP_CHARS:
        return await asyncio.to_thread(work)
    return work()
