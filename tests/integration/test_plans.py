"""Each turn's plan record: what was sent, by reference (ranges, the summary's number)
and tokens, with the provider's usage and the turn's money, and the session's receipt;
the same on both stores, end to end through the openai SDK."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from proxy.sessions.records import PLANS_KEPT
from tests.benchmarks.scorecard import generate
from tests.integration.test_metrics import delta, scrape
from tests.integration.test_recall_memory import ask, client, drive, model_calls, start
from tests.proxies import MODEL
from tests.upstream import FakeUpstream

KEY = {"Authorization": "Bearer tenant-a-key-0123456789"}


def get(url: str, path: str) -> Any:
    response = httpx.get(url + path, headers=KEY)
    assert response.status_code == 200, response.text
    return response.json()


def said(message: dict[str, Any]) -> tuple[str, Any]:
    return message["role"], message.get("content")


def test_each_turn_records_what_it_sent_by_reference_and_what_it_cost(
    upstream: FakeUpstream, start_proxy, store: dict[str, Any]
) -> None:
    session = f"plans-{store.get('store', 'disk')}"
    url = start(start_proxy, upstream, session=store)
    before = scrape(url)
    drive(client(url, session), MODEL, generate(turns=80, facts=12, updates=4))
    after = scrape(url)
    bodies = model_calls(upstream)
    records = get(url, f"/v1/sessions/{session}/plans")["data"]
    shown = get(url, f"/v1/sessions/{session}")
    transcript, receipt = shown["messages"], shown["receipt"]

    assert len(records) == len(bodies) < PLANS_KEPT  # one record per turn, in order
    versions = [record["version"] for record in records]
    assert versions == sorted(set(versions))
    kinds: set[str] = set()
    for record, body in zip(records, bodies, strict=True):
        parts = {part["kind"]: part for part in record["parts"]}
        kinds.update(parts)
        # The parts add up to what was sent, and the tokens not sent are the rest.
        assert sum(part["tokens"] for part in record["parts"]) == record["tokens_sent"]
        assert record["tokens_saved"] == record["tokens_original"] - record["tokens_sent"]
        # The window named by its range is exactly the conversation the model was sent
        # (everything else sent is a system message: prompt, summary, recall, memory).
        start_at, end = parts["window"]["range"]
        conversation = [said(m) for m in body["messages"] if m["role"] != "system"]
        assert conversation == [said(m) for m in transcript[start_at:end]]
        # Nothing falls between the summary and the window.
        covered = parts["summary"]["covers"][1] if "summary" in parts else 0
        assert covered + parts["window"]["dropped"] == start_at
        # A record names what was sent; it copies none of it.
        assert len(orjson.dumps(record)) < 1024
    assert {"system", "summary", "pinned", "recall", "window"} <= kinds
    # The session's receipt, stored with each turn in this store, sums the turns' money.
    assert receipt["turns"] == len(records)
    for kind in ("spent", "summaries", "resend", "net"):
        assert abs(receipt[kind] - sum(record["cost"][kind] for record in records)) < 1e-8
    assert all(record["usage"]["prompt"] > 0 for record in records)

    labels = {"model": MODEL, "api": "chat", "kind": "saved"}
    tokens = delta(before, after, "context_proxy_tokens_total", **labels)
    assert tokens == sum(record["tokens_saved"] for record in records)


def test_a_memory_block_is_recorded_with_its_memory(upstream: FakeUpstream, start_proxy) -> None:
    url = start(start_proxy, upstream, memory={"enabled": True})
    shared = {"X-Memory-Id": "team-memory"}
    ask(client(url, "monday", **shared), "The travel budget is $4,250.")
    ask(client(url, "tuesday", **shared), "What is the travel budget?")
    records = get(url, "/v1/sessions/tuesday/plans")["data"]
    memory = [part for part in records[-1]["parts"] if part["kind"].startswith("memory")]
    assert memory and all(part["memory_id"] == "team-memory" for part in memory)
    assert sum(part["tokens"] for part in records[-1]["parts"]) == records[-1]["tokens_sent"]
