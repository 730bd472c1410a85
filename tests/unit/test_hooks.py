"""What follows a stored turn reads what the commit stored, never the engine's state:
the memory learns exactly the messages appended, the next summary is planned on the
meta as it now is."""

from __future__ import annotations

from typing import Any

from proxy.engine.commit import Stored
from proxy.engine.types import Request
from tests.unit.engines import Parts


def said(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def echo(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": f"echo: {text}"}


def observed(parts: Parts) -> list[Stored]:
    seen: list[Stored] = []
    hooks = parts.engine.parts.after
    after = hooks.stored

    async def recorded(request: Request, stored: Stored) -> None:
        seen.append(stored)
        await after(request, stored)

    hooks.stored = recorded  # type: ignore[method-assign]
    return seen


async def test_the_hooks_get_what_the_commit_stored(parts: Parts) -> None:
    seen = observed(parts)
    await parts.turn([said("one")])
    await parts.turn([said("one"), echo("one"), said("two")], memory_id="m")
    first, second = seen
    assert [s.message for s in second.messages] == [said("two"), echo("two")]
    meta = await parts.store.load("t1", "s")
    assert meta is not None and second.meta == meta and first.meta.version == meta.version - 1
    assert (
        second.growth
        == meta.totals[next(iter(meta.totals))] - first.meta.totals[next(iter(meta.totals))]
    )


async def test_a_turn_not_stored_runs_no_hook(parts: Parts) -> None:
    seen = observed(parts)
    await parts.turn([said("hello")], session=None)
    assert seen == []
