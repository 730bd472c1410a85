"""A client's request to a proxy served in this process, settled: the proxy finished it and
runs no summary made ahead. A benchmark that waits so between its client's requests (as a
person reading a reply, or a tool running, gives the proxy time to) prices tokens only:
its figures are the same to the cent from run to run, whatever the machine's speed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client.metrics import MetricWrapperBase

from proxy.observability.metrics import BACKGROUND_TASKS, REQUESTS
from tests.waiting import eventually

__all__ = ["settled"]

SECONDS = 600.0  # a summary made ahead by a local model on two shared cores


@contextmanager
def settled() -> Iterator[None]:
    """Around one request to the proxy: on leaving, wait until the proxy counted it finished
    (a streamed reply's turn is stored after its last event) and runs no background summary."""
    finished = _sum(REQUESTS)
    yield
    eventually(
        lambda: _sum(REQUESTS) > finished and _sum(BACKGROUND_TASKS) == 0,
        "the proxy to finish the request and its summaries made ahead",
        seconds=SECONDS,
    )


def _sum(metric: MetricWrapperBase) -> float:
    """The metric's value over all its series, in this process's registry."""
    return sum(
        sample.value
        for family in metric.collect()
        for sample in family.samples
        if not sample.name.endswith("_created")
    )
