"""/metrics as Prometheus sees it, the request log, and several workers."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from proxy.cli.local import held_port
from tests.integration.test_sessions import is_summarizer, small_model, words
from tests.proxies import MODEL, UPSTREAM_KEY, proxy_config
from tests.servers import proxy_command, stop, wait_ready
from tests.upstream import FakeUpstream, Reply

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    response = httpx.get(url + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_requests_tokens_and_compressions_are_counted(upstream: FakeUpstream, start_proxy) -> None:
    url = start_proxy(small_model(upstream))
    upstream.default = Reply(
        respond=lambda body: "Summary: notes." if is_summarizer(body) else "ok"
    )
    sdk = openai.OpenAI(
        base_url=url + "/v1",
        api_key="k",
        max_retries=0,
        default_headers={"X-Session-Id": "metered"},
    )
    before = scrape(url)
    messages: list[dict[str, Any]] = []
    for turn in range(8):
        messages.append({"role": "user", "content": words(90, f"t{turn}w")})
        sdk.chat.completions.create(model=MODEL, messages=messages)
        messages.append({"role": "assistant", "content": "ok"})
    list(
        sdk.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "s"}], stream=True
        )
    )
    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    after = scrape(url)

    ok = {"model": MODEL, "status": "200"}
    assert delta(before, after, "context_proxy_requests_total", api="chat", **ok) == 9
    assert (
        delta(
            before, after, "context_proxy_requests_total", api="chat", model="other", status="404"
        )
        == 1
    )
    client = delta(
        before, after, "context_proxy_tokens_total", api="chat", model=MODEL, kind="client"
    )
    sent = delta(before, after, "context_proxy_tokens_total", api="chat", model=MODEL, kind="sent")
    saved = delta(
        before, after, "context_proxy_tokens_total", api="chat", model=MODEL, kind="saved"
    )
    assert client > sent > 0 and saved == client - sent
    assert delta(
        before, after, "context_proxy_tokens_total", api="chat", model=MODEL, kind="upstream_prompt"
    )
    assert delta(
        before, after, "context_proxy_compressions_total", api="chat", model=MODEL, method="summary"
    )
    assert delta(
        before, after, "context_proxy_compressions_total", api="chat", model=MODEL, method="none"
    )
    summaries = sum(
        delta(
            before,
            after,
            "context_proxy_summarizations_total",
            model=MODEL,
            outcome="success",
            mode=mode,
        )
        for mode in ("sync", "background")
    )
    assert summaries >= 1
    assert (
        delta(
            before, after, "context_proxy_request_duration_seconds_count", api="chat", model=MODEL
        )
        == 9
    )
    assert delta(before, after, "context_proxy_upstream_duration_seconds_count", model=MODEL) == 9
    assert (
        delta(
            before, after, "context_proxy_overhead_duration_seconds_count", api="chat", model=MODEL
        )
        == 9
    )
    assert (
        delta(
            before,
            after,
            "context_proxy_time_to_first_token_seconds_count",
            api="chat",
            model=MODEL,
        )
        == 1
    )
    assert delta(before, after, "context_proxy_context_utilization_ratio_count", model=MODEL) == 9
    assert delta(before, after, "context_proxy_fact_retention_ratio_count", model=MODEL) >= 1
    assert delta(
        before,
        after,
        "context_proxy_store_operation_duration_seconds_count",
        store="disk",
        operation="commit",
    )
    # The test upstream counts like the proxy does: calibration stays near 1.
    ratio = value(after, "context_proxy_token_estimate_ratio", model=MODEL)
    assert 0.8 < ratio <= 1.05


def test_label_values_stay_bounded(upstream: FakeUpstream, start_proxy) -> None:
    """1,000 random session ids and model names must not create 1,000 series."""
    url = start_proxy(proxy_config(upstream))
    before = scrape(url)
    with httpx.Client(base_url=url) as client:
        for i in range(1000):
            session = uuid.uuid4().hex
            model = MODEL if i % 2 else f"unknown-{session}"
            client.post(
                "/v1/chat/completions",
                json={"model": model, "messages": [{"role": "user", "content": session}]},
                headers={"X-Session-Id": session, "authorization": f"Bearer key-{session}"},
            )
    after = scrape(url)
    new_series = set(after) - set(before)
    label_values = {v for _, labels in after for _, v in labels}
    assert not any("unknown-" in v or len(v) >= 32 for v in label_values), "user text in a label"
    assert len(new_series) < 100, sorted(new_series)[:20]
    assert (
        delta(
            before, after, "context_proxy_requests_total", api="chat", model="other", status="404"
        )
        == 500
    )
    assert (
        delta(before, after, "context_proxy_requests_total", api="chat", model=MODEL, status="200")
        == 500
    )


def serve_process(tmp_path: Path, upstream: FakeUpstream, *args: str, **env: str) -> tuple:
    config = proxy_config(upstream)
    config["session"] = {"path": str(tmp_path / "sessions")}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    log = (tmp_path / "proxy.log").open("w+")
    command = proxy_command("serve", "--config", str(path))
    with held_port() as port:  # until the proxy listens on it
        process = subprocess.Popen(
            [*command, "--port", str(port), *args],
            env=os.environ | env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, process)
    return process, url, log


def test_two_workers_count_each_request_once(tmp_path: Path, upstream: FakeUpstream) -> None:
    process, url, log = serve_process(tmp_path, upstream, "--workers", "2")
    try:
        wait_ready(url, process)
        for i in range(20):  # a new connection each: the workers share them out
            body = {"model": MODEL, "messages": [{"role": "user", "content": f"{i}"}]}
            assert httpx.post(url + "/v1/chat/completions", json=body).status_code == 200
        for _ in range(10):  # new connections land on either worker
            with httpx.Client() as fresh:
                samples = scrape_with(fresh, url)
            assert (
                value(
                    samples, "context_proxy_requests_total", api="chat", model=MODEL, status="200"
                )
                == 20
            )
    finally:
        stop(process)
        log.close()


def scrape_with(client: httpx.Client, url: str) -> Samples:
    text = client.get(url + "/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_json_request_log_has_no_content_or_secrets(tmp_path: Path, upstream: FakeUpstream) -> None:
    process, url, log = serve_process(tmp_path, upstream, CONTEXT_PROXY_SERVER_LOG_FORMAT="json")
    client_key = "sk-client-key-that-must-not-leak-123"
    try:
        wait_ready(url, process)
        sdk = openai.OpenAI(
            base_url=url + "/v1",
            api_key=client_key,
            max_retries=0,
            default_headers={"X-Session-Id": "private-session-name"},
        )
        sdk.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "PINEAPPLE-CONTENT"}]
        )
    finally:
        stop(process)
        log.seek(0)
        text = log.read()
        log.close()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    [line] = [entry for entry in lines if entry["logger"] == "context_proxy.access"]
    assert line["model"] == MODEL and line["status"] == 200
    assert line["tokens_sent"] > 0 and line["compression"] == "none"
    assert line["latency_ms"] >= line["upstream_ms"] > 0
    assert len(line["request_id"]) == 32
    for secret in ("PINEAPPLE-CONTENT", client_key, UPSTREAM_KEY, "private-session-name"):
        assert secret not in text


def test_every_door_is_counted_under_its_api(upstream: FakeUpstream, start_proxy) -> None:
    url = start_proxy(small_model(upstream))
    before = scrape(url)
    session = {"X-Session-Id": "doors-metered"}
    claude = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, default_headers=session)
    claude.messages.create(model=MODEL, max_tokens=20, messages=[{"role": "user", "content": "a"}])
    sdk = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, default_headers=session)
    sdk.responses.create(model=MODEL, input="b")
    list(sdk.responses.create(model=MODEL, input="c", stream=True))
    after = scrape(url)
    ok = {"model": MODEL, "status": "200"}
    assert delta(before, after, "context_proxy_requests_total", api="messages", **ok) == 1
    assert delta(before, after, "context_proxy_requests_total", api="responses", **ok) == 2
    assert delta(before, after, "context_proxy_requests_total", api="chat", **ok) == 0
    sent = delta(
        before, after, "context_proxy_tokens_total", api="responses", model=MODEL, kind="sent"
    )
    assert sent > 0
    ttft = "context_proxy_time_to_first_token_seconds_count"
    assert delta(before, after, ttft, api="responses", model=MODEL) == 1
