"""A circuit breaker for the summarizer, so a model that keeps failing is left alone for a
while rather than called, paid and waited for on every turn."""

from __future__ import annotations

import time
from collections.abc import Callable

from proxy.observability import metrics

__all__ = ["MAX_BACKOFF_SECONDS", "Breaker"]

MAX_BACKOFF_SECONDS = 300.0


class Breaker:
    def __init__(
        self,
        *,
        label: str,
        failures: int,
        backoff: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._label = label
        self._clock = clock  # monotonic seconds; a test passes its own
        self._threshold = failures
        self._first_backoff = backoff
        self._backoff = backoff
        self._failures = 0
        self._open_until = 0.0
        self._trying = False  # a half-open call is on its way

    @property
    def open(self) -> bool:
        """Failing, and not yet due for a trial call."""
        return self._failures >= self._threshold and self._clock() < self._open_until

    def allow(self) -> bool:
        """Whether a summary may be made now (counted as skipped when not)."""
        if self._failures < self._threshold:
            return True
        if self._clock() >= self._open_until and not self._trying:
            self._trying = True  # the one call that finds out whether the model is back
            return True
        metrics.SUMMARIZATIONS_SKIPPED.labels(self._label).inc()
        return False

    def succeeded(self) -> None:
        self._failures, self._backoff, self._trying = 0, self._first_backoff, False
        metrics.SUMMARIZER_OPEN.labels(self._label).set(0)

    def failed(self) -> None:
        self._failures += 1
        if self._failures < self._threshold:
            return
        if self._trying:  # the trial call failed too: wait twice as long
            self._backoff = min(2 * self._backoff, MAX_BACKOFF_SECONDS)
        self._trying = False
        self._open_until = self._clock() + self._backoff
        metrics.SUMMARIZER_OPEN.labels(self._label).set(1)
