"""A clock a test moves by hand, for the parts that take one (`clock=`): a timer is
waited out by moving the clock past it, never by sleeping."""

from __future__ import annotations


class Clock:
    """`clock()` is its time in seconds; it moves only by `advance`."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
