"""One request's measurements: metrics and its access-log line, written once at the end.

The engine marks the moments (upstream start/end, first token) and hands over what
it learned (the planned turn, the provider's usage, the turn's money once stored): this
is its `Observer`. `finish` turns that into Prometheus samples and one log line without
message content.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from proxy.costs.receipts import TurnCost
from proxy.costs.usage import usage_of
from proxy.engine import Turn
from proxy.observability import metrics

__all__ = ["RequestTelemetry", "access_log"]

access_log = logging.getLogger("context_proxy.access")


@dataclass
class RequestTelemetry:
    model: str  # already a bounded label value
    api: str = "chat"  # the door: chat, messages or responses
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started: float = field(default_factory=time.perf_counter)
    stream: bool = False
    turn: Turn | None = None
    usage: dict[str, Any] | None = None
    cost: TurnCost | None = None
    upstream_seconds: float = 0.0
    first_token_seconds: float | None = None
    _upstream_started: float | None = None
    _finished: bool = False

    def planned(self, turn: Turn) -> None:
        self.turn = turn

    def used(self, usage: dict[str, Any] | None) -> None:
        self.usage = usage

    def priced(self, cost: TurnCost | None) -> None:
        self.cost = cost

    def upstream_started(self) -> None:
        self._upstream_started = time.perf_counter()

    def upstream_finished(self) -> None:
        if self._upstream_started is not None:
            self.upstream_seconds += time.perf_counter() - self._upstream_started
            self._upstream_started = None

    def first_token(self) -> None:
        if self.first_token_seconds is None:
            self.first_token_seconds = time.perf_counter() - self.started

    def finish(self, status: int) -> None:
        """Record everything once, whether the request succeeded or not."""
        if self._finished:
            return
        self._finished = True
        self.upstream_finished()
        total = time.perf_counter() - self.started
        model = self.model
        metrics.REQUESTS.labels(model, self.api, str(status)).inc()
        metrics.REQUEST_DURATION.labels(model, self.api).observe(total)
        if self.upstream_seconds:
            metrics.UPSTREAM_DURATION.labels(model).observe(self.upstream_seconds)
        metrics.OVERHEAD_DURATION.labels(model, self.api).observe(
            max(0.0, total - self.upstream_seconds)
        )
        if self.first_token_seconds is not None:
            metrics.TIME_TO_FIRST_TOKEN.labels(model, self.api).observe(self.first_token_seconds)
        turn = self.turn
        fitted = turn is not None and turn.managed and status < 400
        used = usage_of(self.usage)
        if fitted:
            assert turn is not None
            self._record_context(turn, used.prompt if used is not None else None)
        if used is not None:
            metrics.TOKENS.labels(model, self.api, "upstream_prompt").inc(used.prompt)
            metrics.TOKENS.labels(model, self.api, "cached").inc(used.cache_read)
            metrics.TOKENS.labels(model, self.api, "cache_write").inc(used.cache_write)
            metrics.TOKENS.labels(model, self.api, "completion").inc(used.output)
        cost = self.cost
        if cost is not None:  # a priced turn, answered and stored: its money
            metrics.COST.labels(model, self.api, "spent").inc(cost.spent)
            metrics.COST.labels(model, self.api, "summaries").inc(cost.summaries)
            metrics.COST.labels(model, self.api, "resend").inc(cost.resend)
            metrics.NET_SAVED.labels(model, self.api).inc(cost.net)
        access_log.info(
            "%s %s %s",
            status,
            model,
            turn.compression if fitted and turn else "-",
            extra={
                "request_id": self.request_id,
                "model": model,
                "api": self.api,
                "status": status,
                "stream": self.stream,
                "session": turn is not None and turn.key is not None,
                "tokens_original": turn.tokens_original if fitted and turn else None,
                "tokens_sent": turn.tokens_sent if fitted and turn else None,
                "prompt_tokens": used.prompt if used else None,
                "cached_tokens": used.cache_read if used else None,
                "cache_write_tokens": used.cache_write if used else None,
                "completion_tokens": used.output if used else None,
                "net_usd": round(cost.net, 9) if cost else None,
                "compression": turn.compression if fitted and turn else None,
                "latency_ms": round(total * 1000, 1),
                "upstream_ms": round(self.upstream_seconds * 1000, 1),
            },
        )

    def _record_context(self, turn: Turn, prompt_tokens: Any) -> None:
        """Tokens in, sent and saved. A request the proxy passed on without counting (it
        fitted by its size) is counted by the provider's own prompt tokens."""
        model = self.model
        original, sent = turn.tokens_original, turn.tokens_sent
        if original is None or sent is None:
            if not isinstance(prompt_tokens, int):
                metrics.COMPRESSIONS.labels(model, self.api, turn.compression).inc()
                return
            original = sent = prompt_tokens
        metrics.TOKENS.labels(model, self.api, "client").inc(original)
        metrics.TOKENS.labels(model, self.api, "sent").inc(sent)
        metrics.TOKENS.labels(model, self.api, "saved").inc(max(0, original - sent))
        metrics.COMPRESSIONS.labels(model, self.api, turn.compression).inc()
        if original:
            metrics.COMPRESSION_RATIO.labels(model).observe(min(1.0, sent / original))
        if turn.input_limit:
            metrics.CONTEXT_UTILIZATION.labels(model).observe(sent / turn.input_limit)
