"""Every Prometheus metric the proxy exports, defined once.

Names carry the `context_proxy_` prefix and base units (seconds, tokens,
ratios). Labels are bounded: `model` is a configured model name or `other`,
never a session id, key or anything else a client chooses.

With several workers (`context-proxy serve --workers N`) prometheus-client's
multiprocess mode is used: `PROMETHEUS_MULTIPROC_DIR` must be set before this
module is imported (the CLI does that), and `/metrics` aggregates all workers.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

__all__ = [
    "BACKGROUND_TASKS",
    "COMPRESSIONS",
    "COMPRESSION_RATIO",
    "CONTEXT_UTILIZATION",
    "COST",
    "DROPPED_FIELDS",
    "FACT_RETENTION",
    "MODEL_LIMIT_DEFAULTED",
    "MULTIPROCESS_ENV",
    "NET_SAVED",
    "OTHER_MODEL",
    "OVERHEAD_DURATION",
    "REPLIES_CUT",
    "REQUESTS",
    "REQUEST_DURATION",
    "STORE_DURATION",
    "SUMMARIZATIONS",
    "SUMMARIZATIONS_SKIPPED",
    "SUMMARIZATION_DURATION",
    "SUMMARIZATION_TOKENS",
    "SUMMARIZER_OPEN",
    "TIME_TO_FIRST_TOKEN",
    "TOKENS",
    "TOKEN_ESTIMATE_RATIO",
    "UPSTREAM_DURATION",
    "ModelLabels",
    "exposition",
]

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
OTHER_MODEL = "other"

# Buckets suited to what each histogram measures.
_LATENCY = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300)
_OVERHEAD = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
_RATIO = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
_STORE = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)

REQUESTS = Counter(
    "context_proxy_requests",
    "Requests for a model, by the API they came through (chat, messages, responses) "
    "and HTTP status.",
    ["model", "api", "status"],
)
REQUEST_DURATION = Histogram(
    "context_proxy_request_duration_seconds",
    "Total time to answer a request (to the last byte when streaming).",
    ["model", "api"],
    buckets=_LATENCY,
)
UPSTREAM_DURATION = Histogram(
    "context_proxy_upstream_duration_seconds",
    "Time spent waiting for the provider.",
    ["model"],
    buckets=_LATENCY,
)
OVERHEAD_DURATION = Histogram(
    "context_proxy_overhead_duration_seconds",
    "Time the proxy itself added: total minus upstream "
    "(summaries made while the client waits count here).",
    ["model", "api"],
    buckets=_OVERHEAD,
)
TIME_TO_FIRST_TOKEN = Histogram(
    "context_proxy_time_to_first_token_seconds",
    "Streaming: time from the request to the first content chunk sent to the client.",
    ["model", "api"],
    buckets=_LATENCY,
)
TOKENS = Counter(
    "context_proxy_tokens",
    "Tokens by kind: client (the full context the client's request stands for), "
    "sent (what the proxy sent upstream, by its count), upstream_prompt (the provider's "
    "input tokens, cached and written included), cached (of those, read from the "
    "provider's prompt cache), cache_write (of those, written to it), completion, "
    "saved (client minus sent: tokens, not money).",
    ["model", "api", "kind"],
)
NET_SAVED = Gauge(
    "context_proxy_net_saved_usd_total",
    "Net saving in US dollars: what resending the client's whole conversation with the "
    "provider's prompt cache would have cost, minus what the proxy spent (its requests at "
    "their reported usage plus the summaries they caused). It may be negative: then the "
    "proxy cost more than resending would have. Models with no known price add nothing.",
    ["model", "api"],
    multiprocess_mode="sum",
)
COST = Counter(
    "context_proxy_cost_usd",
    "US dollars by kind: spent (requests at their reported usage, plus summaries), "
    "summaries (the part of spent on the summarizer), resend (what resending the whole "
    "conversation with the prompt cache would have cost). Priced models only.",
    ["model", "api", "kind"],
)
CONTEXT_UTILIZATION = Histogram(
    "context_proxy_context_utilization_ratio",
    "Tokens sent upstream as a share of the model's input limit.",
    ["model"],
    buckets=_RATIO,
)
COMPRESSION_RATIO = Histogram(
    "context_proxy_compression_ratio",
    "Tokens sent upstream divided by the tokens of the full context.",
    ["model"],
    buckets=_RATIO,
)
COMPRESSIONS = Counter(
    "context_proxy_compressions",
    "Requests by how their context was fitted: none, summary or truncated.",
    ["model", "api", "method"],
)
SUMMARIZATIONS = Counter(
    "context_proxy_summarizations",
    "Summaries made, by outcome (success, error, timeout) and mode (sync, background).",
    ["model", "outcome", "mode"],
)
SUMMARIZATIONS_SKIPPED = Counter(
    "context_proxy_summarizations_skipped",
    "Summaries not attempted because the summarizer's circuit breaker was open.",
    ["model"],
)
SUMMARIZER_OPEN = Gauge(
    "context_proxy_summarizer_open",
    "1 while the summary model's circuit breaker is open (it failed repeatedly), else 0.",
    ["model"],
    multiprocess_mode="max",
)
SUMMARIZATION_DURATION = Histogram(
    "context_proxy_summarization_duration_seconds",
    "Time to make one summary (all its chunked calls).",
    ["model", "mode"],
    buckets=_LATENCY,
)
SUMMARIZATION_TOKENS = Counter(
    "context_proxy_summarization_tokens",
    "Tokens the summarizer read (input) and wrote (output).",
    ["model", "kind"],
)
FACT_RETENTION = Histogram(
    "context_proxy_fact_retention_ratio",
    "Share of the evicted span's facts the model's summary kept, before pinning.",
    ["model"],
    buckets=_RATIO,
)
TOKEN_ESTIMATE_RATIO = Gauge(
    "context_proxy_token_estimate_ratio",
    "Calibration: the provider's prompt tokens divided by the proxy's estimate (smoothed).",
    ["model"],
    multiprocess_mode="mostrecent",
)
DROPPED_FIELDS = Counter(
    "context_proxy_dropped_fields",
    "Request fields (vendor fields, server tools, parameters the provider does not take)"
    " a door did not carry to the provider.",
    ["api", "field"],
)
REPLIES_CUT = Counter(
    "context_proxy_replies_cut",
    "Replies longer than session.max_reply_bytes: answered whole, stored as a marked cut.",
    ["model"],
)
MODEL_LIMIT_DEFAULTED = Counter(
    "context_proxy_model_limit_defaulted",
    "Requests whose budget used context.default_context_window: no limit was known.",
    ["model"],
)
STORE_DURATION = Histogram(
    "context_proxy_store_operation_duration_seconds",
    "Session store operation latency.",
    ["store", "operation"],
    buckets=_STORE,
)
BACKGROUND_TASKS = Gauge(
    "context_proxy_background_tasks",
    "Background summarizations started and not yet ended.",
    multiprocess_mode="livesum",
)


class ModelLabels:
    """Maps a request's model to a bounded label value: the configured name that serves
    it (a wildcard route's own name, `openai/*`), else `other`."""

    def __init__(self, served_as: Callable[[str], str | None]) -> None:
        self._served_as = served_as

    def __call__(self, model: object) -> str:
        name = self._served_as(model) if isinstance(model, str) else None
        return name or OTHER_MODEL


def exposition() -> tuple[bytes, str]:
    """The /metrics body: this process's metrics, or every worker's in multiprocess mode."""
    if os.environ.get(MULTIPROCESS_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST
