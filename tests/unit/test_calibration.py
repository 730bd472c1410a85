"""The session's calibration (`proxy.engine.planner.calibration`): how far the
provider's count of a prompt is from ours, learned turn by turn, and the factor a
budget is divided by. Worked by hand: a wrong smoothing or an unbounded factor is a
session whose requests overflow, or whose context is starved by one odd sample."""

from __future__ import annotations

import pytest

from proxy.engine.planner.calibration import MAX_FACTOR, SMOOTHING, factor, smoothed


def test_the_first_turn_sets_the_ratio_of_the_providers_count_to_ours() -> None:
    assert smoothed(None, 1000, 1200) == 1.2
    assert smoothed(None, 800, 600) == 0.75  # an overcount is learned as it is


def test_each_later_turn_moves_it_a_fifth_of_the_way_to_what_it_saw() -> None:
    assert SMOOTHING == 0.2
    assert smoothed(1.2, 1000, 1000) == pytest.approx(1.16)  # 1.2 + 0.2 × (1.0 - 1.2)
    assert smoothed(1.0, 500, 750) == pytest.approx(1.1)  # 1.0 + 0.2 × (1.5 - 1.0)


def test_a_steady_provider_count_is_converged_on() -> None:
    ratio: float | None = 1.5
    for _ in range(10):
        ratio = smoothed(ratio, 1000, 1100)
    # 1.1 + 0.4 × 0.8¹⁰: what is left of the first distance after ten turns.
    assert ratio == pytest.approx(1.1 + 0.4 * 0.8**10)
    assert ratio is not None and 1.1 < ratio < 1.15


@pytest.mark.parametrize(
    ("estimated", "actual"),
    [
        (None, 1200),  # a turn we did not count (sent whole, by its bound)
        (0, 1200),
        (-3, 1200),
        (1000, None),  # no usage reported
        (1000, 0),
        (1000, -1),
        (1000, 1200.0),  # not a count
        (1000, "1200"),
    ],
)
def test_a_turn_with_nothing_to_learn_leaves_the_calibration(
    estimated: int | None, actual: object
) -> None:
    assert smoothed(1.3, estimated, actual) == 1.3
    assert smoothed(None, estimated, actual) is None


def test_the_factor_divides_only_an_undercount_and_is_capped() -> None:
    assert factor(None) == 1.0  # nothing learned
    assert factor(0.7) == 1.0  # we overcount: it only costs headroom
    assert factor(1.3) == 1.3
    assert MAX_FACTOR == 1.5
    assert factor(1.5) == 1.5
    assert factor(4.0) == 1.5  # one odd sample cannot starve the context
