"""The suite's tiers (tests/conftest.py): a marker expression that no integration test can
match leaves the integration folders uncollected; any other collects them."""

from __future__ import annotations

import pytest

from tests.conftest import _no_integration_test_matches


@pytest.mark.parametrize("markexpr", ["unit", "unit and not slow", "not integration"])
def test_the_fast_loop_collects_no_integration_folder(markexpr: str) -> None:
    assert _no_integration_test_matches(markexpr)


@pytest.mark.parametrize(
    "markexpr",
    ["", "integration", "not unit", "unit or slow", "agents", "not local_model", "parametrize"],
)
def test_anything_else_collects_them(markexpr: str) -> None:
    assert not _no_integration_test_matches(markexpr)
