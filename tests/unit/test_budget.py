"""A request's token budget (`proxy.engine.planner.budget`): the share of the model's
input limit a turn may fill, less the output it asks room for, divided by the session's
calibration where our tokenizer undercounts. Every figure is worked out by hand here:
a budget one token too large is a request the provider refuses."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.engine.planner.budget import budget
from proxy.engine.planner.calibration import MAX_FACTOR
from proxy.errors import ContextOverflow


def test_the_budget_is_the_configured_share_of_the_input_limit() -> None:
    assert budget("m", 1000, {}, 0.8) == 800
    assert budget("m", 128_000, {}, 0.8) == 102_400
    assert budget("m", 999, {}, 0.8) == 799  # 799.2, rounded down: never over the share


def test_room_for_the_requested_output_comes_off_the_limit_not_the_share() -> None:
    # 1000 - 300 = 700 is less than 800: the output's room decides.
    assert budget("m", 1000, {"max_tokens": 300}, 0.8) == 700
    # 1000 - 100 = 900 leaves the share (800) as it is.
    assert budget("m", 1000, {"max_tokens": 100}, 0.8) == 800
    # `max_completion_tokens` (the newer name) is the one read when both are set.
    assert budget("m", 1000, {"max_completion_tokens": 400, "max_tokens": 100}, 0.8) == 600


@pytest.mark.parametrize("requested", [0, "300", 300.0, None])
def test_an_output_request_that_is_not_a_positive_integer_takes_no_room(requested: object) -> None:
    assert budget("m", 1000, {"max_tokens": requested}, 0.8) == 800


def test_a_session_that_we_undercount_gets_a_budget_divided_by_its_calibration() -> None:
    assert budget("m", 1000, {}, 0.8, 1.25) == 640  # 800 / 1.25
    assert budget("m", 999, {}, 0.8, 1.1) == 726  # floor(799 / 1.1) = floor(726.36)
    assert budget("m", 1000, {"max_tokens": 300}, 0.8, 1.4) == 500  # 700 / 1.4


def test_overcounting_is_left_alone_and_one_odd_sample_cannot_starve_the_context() -> None:
    assert budget("m", 1000, {}, 0.8, 0.7) == 800  # overcounting costs only headroom
    assert budget("m", 1000, {}, 0.8, 10.0) == 533  # capped at 1.5: floor(800 / 1.5)


@pytest.mark.parametrize("requested", [1000, 1200])
def test_an_output_request_that_leaves_no_input_room_is_an_overflow_naming_it(
    requested: int,
) -> None:
    with pytest.raises(ContextOverflow) as raised:
        budget("tiny", 1000, {"max_tokens": requested}, 0.8)
    assert raised.value.param == "max_tokens"
    assert f"max_tokens={requested}" in str(raised.value) and "tiny" in str(raised.value)


@given(
    limit=st.integers(min_value=1, max_value=2_000_000),
    ratio=st.floats(min_value=0.1, max_value=0.95),
    requested=st.one_of(st.none(), st.integers(min_value=1, max_value=2_000_000)),
    calibrated=st.one_of(st.none(), st.floats(min_value=0.1, max_value=5.0)),
)
def test_what_the_provider_counts_of_a_budget_fits_its_limit_with_the_output(
    limit: int, ratio: float, requested: int | None, calibrated: float | None
) -> None:
    """A prompt of `budget` of our tokens is at most budget × calibration of the
    provider's (within the calibration's cap): with the output asked for, it fits."""
    body = {} if requested is None else {"max_tokens": requested}
    factor = min(MAX_FACTOR, max(1.0, calibrated or 1.0))
    try:
        tokens = budget("m", limit, body, ratio, calibrated)
    except ContextOverflow:  # only where not one calibrated token is left
        assert min(math.floor(ratio * limit), limit - (requested or 0)) < factor
        return
    assert tokens >= 1
    provider = tokens * factor
    assert provider <= ratio * limit
    assert provider + (requested or 0) <= limit
