"""Fixtures of the engine's unit tests (`tests/unit/engines.py`), imported only by the
tests that ask for them: the other unit tests start without the engine."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.unit.engines import Parts


@pytest.fixture
async def make_parts(tmp_path: Path) -> AsyncIterator[Callable[..., Parts]]:
    """Engines in this process on a disk store in `tmp_path` (`engines.build`): called
    with the model's input window and config sections (`engines.settings`)."""
    from tests.unit.engines import build, settings

    made: list[Parts] = []

    def make(window: int | None = None, **sections: Any) -> Parts:
        made.append(build(str(tmp_path / f"store-{len(made)}"), settings(window, **sections)))
        return made[-1]

    yield make
    for each in made:
        await each.close()


@pytest.fixture
def parts(make_parts: Callable[..., Parts]) -> Parts:
    """An engine on the model's own window (128k tokens: nothing is compressed)."""
    return make_parts()
