"""The summarizer's circuit breaker on a clock the test moves: a model that keeps failing
is left alone for its back-off, then tried once; a failed trial doubles the back-off (up
to its cap), a successful one closes the breaker. The dashboards see it open and count
the summaries it skipped."""

from __future__ import annotations

import uuid

from prometheus_client import REGISTRY

from proxy.engine.folds.breaker import MAX_BACKOFF_SECONDS, Breaker
from tests.clock import Clock


def skipped(label: str) -> float:
    found = REGISTRY.get_sample_value(
        "context_proxy_summarizations_skipped_total", {"model": label}
    )
    return found or 0.0


def shown_open(label: str) -> float | None:
    return REGISTRY.get_sample_value("context_proxy_summarizer_open", {"model": label})


def opened(failures: int = 3, backoff: float = 5.0) -> tuple[Breaker, Clock, str]:
    """A breaker that has just opened: `failures` failures in a row."""
    clock, label = Clock(), f"model-{uuid.uuid4().hex[:8]}"
    breaker = Breaker(label=label, failures=failures, backoff=backoff, clock=clock)
    for _ in range(failures):
        assert breaker.allow()
        breaker.failed()
    return breaker, clock, label


def test_failures_below_the_threshold_leave_it_closed() -> None:
    clock = Clock()
    breaker = Breaker(label="m", failures=3, backoff=5.0, clock=clock)
    for _ in range(2):
        assert breaker.allow()
        breaker.failed()
    assert breaker.allow() and not breaker.open
    breaker.succeeded()  # a success starts the count again
    for _ in range(2):
        breaker.failed()
    assert breaker.allow() and not breaker.open


def test_it_opens_for_its_back_off_then_lets_one_trial_through() -> None:
    breaker, clock, label = opened(backoff=5.0)
    assert breaker.open and shown_open(label) == 1
    assert not breaker.allow()
    clock.advance(4.99)
    assert breaker.open and not breaker.allow()
    assert skipped(label) == 2
    clock.advance(0.01)
    assert not breaker.open
    assert breaker.allow()  # the one call that finds out whether the model is back
    assert not breaker.allow()  # others wait for its answer
    breaker.succeeded()
    assert shown_open(label) == 0
    assert breaker.allow() and breaker.allow()
    assert skipped(label) == 3


def test_a_failed_trial_doubles_the_back_off_up_to_its_cap() -> None:
    breaker, clock, _ = opened(backoff=5.0)
    waits = []
    for _ in range(9):
        waited = 0.0
        while not breaker.allow():
            clock.advance(1.0)
            waited += 1.0
        waits.append(waited)
        breaker.failed()  # the trial failed too
    assert waits == [5, 10, 20, 40, 80, 160, 300, 300, 300]
    assert MAX_BACKOFF_SECONDS == 300
    # Back: the trial succeeds, and the next failures start from the first back-off.
    clock.advance(MAX_BACKOFF_SECONDS)
    assert breaker.allow()
    breaker.succeeded()
    for _ in range(3):
        breaker.failed()
    clock.advance(5.0)
    assert breaker.allow()
