"""The Grafana dashboards and provisioning: structure, and every query run by a real Prometheus.

The second part starts a real proxy in front of the test upstream, sends it
real traffic (plain, streaming, errors, a session long enough to summarize),
lets a real `prometheus` scrape its /metrics on loopback, then runs every
panel's expression through Prometheus' query API.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import yaml
from prometheus_client import Counter, Gauge, Histogram

from proxy.cli.local import held_port, running_server
from proxy.observability import metrics
from tests.proxies import MODEL, proxy_config
from tests.summarizing import asks_summary
from tests.upstream import FakeUpstream, Reply

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "grafana"
DASHBOARD_FILES = {
    "overview": GRAFANA / "dashboards" / "overview.json",
    "context": GRAFANA / "dashboards" / "context.json",
}
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "dashboards.yml"
COMPOSE = ROOT / "deploy" / "docker-compose.yml"
# Where deploy/docker-compose.yml mounts ../grafana/dashboards and ../grafana/provisioning.
DASHBOARDS_MOUNT = "/var/lib/grafana/dashboards"
PROVISIONING_MOUNT = "/etc/grafana/provisioning"
DATASOURCE_REF = {"type": "prometheus", "uid": "${datasource}"}
MODEL_FILTER = 'model=~"$model"'
MODEL_QUERY = "label_values(context_proxy_requests_total, model)"
UNKNOWN_LIMIT_MODEL = "no-known-limit"
SELECTOR = re.compile(r"\b(context_proxy_[a-zA-Z0-9_]+)(\{[^}]*\})?")

# Panels that must show data after the traffic below: (dashboard, title) -> label sets required.
CORE_PANELS: dict[tuple[str, str], list[dict[str, str]]] = {
    ("overview", "Requests per second by model and API"): [
        {"model": MODEL, "api": "chat"},
        {"model": MODEL, "api": "messages"},
        {"model": MODEL, "api": "responses"},
    ],
    ("overview", "Request latency p50 / p95 / p99"): [{"model": MODEL}],
    ("context", "Tokens per second: client vs sent vs not sent"): [
        {"model": MODEL, "kind": "client"},
        {"model": MODEL, "kind": "sent"},
    ],
    ("context", "Compressions by method"): [{"model": MODEL, "method": "summary"}],
    ("context", "Net saving (US$)"): [{"model": MODEL}],
    ("context", "Spent vs resending, per hour (US$)"): [
        {"model": MODEL, "kind": "spent"},
        {"model": MODEL, "kind": "resend"},
    ],
    ("context", "Summarizations by outcome and mode"): [{"model": MODEL, "outcome": "success"}],
}


# --- helpers -----------------------------------------------------------------


def load_dashboard(name: str) -> dict[str, Any]:
    return json.loads(DASHBOARD_FILES[name].read_text(encoding="utf-8"))


def all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    found: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def query_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in all_panels(dashboard) if p["type"] != "row"]


def panel_exprs() -> list[tuple[str, str, str]]:
    """(dashboard, panel title, expr) for every target of every panel of both dashboards."""
    return [
        (name, panel["title"], target["expr"])
        for name in DASHBOARD_FILES
        for panel in query_panels(load_dashboard(name))
        for target in panel["targets"]
    ]


def exported_series() -> dict[str, tuple[str, ...]]:
    """Every sample name proxy/metrics.py exports, with its label names."""
    series: dict[str, tuple[str, ...]] = {}
    for value in vars(metrics).values():
        if isinstance(value, Counter):
            series[value._name + "_total"] = value._labelnames
        elif isinstance(value, Histogram):
            for suffix in ("_bucket", "_sum", "_count"):
                series[value._name + suffix] = value._labelnames
        elif isinstance(value, Gauge):
            series[value._name] = value._labelnames
    return series


def family(sample: str) -> str:
    return re.sub(r"_(total|bucket|sum|count)$", "", sample)


def concrete(expr: str) -> str:
    """Substitute Grafana's template variables the way an 'All models' view would."""
    return (
        expr.replace("$__rate_interval", "1m")
        .replace("${model}", ".*")
        .replace("$model", ".*")
        .replace("$__interval", "15s")
    )


def matches(series: dict[str, str], wanted: dict[str, str]) -> bool:
    return all(series.get(key) == value for key, value in wanted.items())


# --- structure ---------------------------------------------------------------


def test_provisioning_files() -> None:
    datasources = yaml.safe_load(DATASOURCES.read_text(encoding="utf-8"))["datasources"]
    [prometheus] = [d for d in datasources if d["type"] == "prometheus"]
    assert prometheus["uid"] == "prometheus"
    assert prometheus["url"] == "http://prometheus:9090"
    providers = yaml.safe_load(PROVIDERS.read_text(encoding="utf-8"))["providers"]
    assert [p["options"]["path"] for p in providers] == [DASHBOARDS_MOUNT]
    assert all(p["type"] == "file" for p in providers)


@pytest.mark.parametrize("name", sorted(DASHBOARD_FILES))
def test_dashboard_structure(name: str) -> None:
    dashboard = load_dashboard(name)
    assert dashboard["uid"] and dashboard["title"] and dashboard["tags"]
    assert dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    datasource = variables["datasource"]
    provisioned = yaml.safe_load(DATASOURCES.read_text(encoding="utf-8"))["datasources"]
    assert datasource["type"] == "datasource" and datasource["query"] == "prometheus"
    # The variable's default is the provisioned Prometheus.
    assert datasource["current"]["value"] in {d["uid"] for d in provisioned}
    model = variables["model"]
    assert model["type"] == "query" and model["datasource"] == DATASOURCE_REF
    query = model["query"]["query"] if isinstance(model["query"], dict) else model["query"]
    assert query == MODEL_QUERY
    assert model["multi"] and model["includeAll"] and model["allValue"] == ".*"

    panels = all_panels(dashboard)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] >= 0 and grid["x"] + grid["w"] <= 24
    for panel in query_panels(dashboard):
        assert panel["type"] in {"timeseries", "stat"}, panel["title"]
        assert panel["datasource"] == DATASOURCE_REF, panel["title"]
        assert panel["targets"], panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE_REF, panel["title"]
            assert target["expr"].strip(), panel["title"]


def test_uids_are_distinct() -> None:
    uids = [load_dashboard(name)["uid"] for name in DASHBOARD_FILES]
    assert len(set(uids)) == len(uids)


def test_every_expr_uses_known_metrics_and_the_model_filter() -> None:
    series = exported_series()
    used: set[str] = set()
    for name, title, expr in panel_exprs():
        selectors = SELECTOR.findall(expr)
        assert selectors, f"{name}/{title}: no context_proxy_ metric in {expr}"
        for sample, labels in selectors:
            assert sample in series, f"{name}/{title}: {sample} is not exported"
            used.add(family(sample))
            if "model" in series[sample]:
                assert MODEL_FILTER in labels, f"{name}/{title}: {sample} lacks {MODEL_FILTER}"
            assert "rate(" not in expr or "[$__rate_interval]" in expr, f"{name}/{title}"
        assert not re.search(r"\[\d+[smh]\]", expr), f"{name}/{title}: use $__rate_interval"
    # Every metric the proxy exports appears on a dashboard.
    assert {family(s) for s in series} - used == set()


def test_compose_mounts_match_provisioning() -> None:
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    assert "prometheus" in services  # the datasource URL's host name
    grafana = [s for s in services.values() if "grafana" in str(s.get("image", ""))]
    assert grafana, "no grafana service"
    targets: set[str] = set()
    for volume in grafana[0].get("volumes", []):
        if isinstance(volume, dict):
            targets.add(str(volume.get("target", "")).rstrip("/"))
        else:
            parts = str(volume).split(":")
            if len(parts) >= 2:
                targets.add(parts[1].rstrip("/"))
    assert {DASHBOARDS_MOUNT, PROVISIONING_MOUNT} <= targets


# --- a real Prometheus over real traffic -------------------------------------


def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.fail("prometheus is not installed (the README's test command installs it)")
    return path


@contextmanager
def running_prometheus(binary: str, scrape: str, workdir: Path) -> Iterator[str]:
    """Run Prometheus on loopback, scraping `scrape` (host:port) every second; yield its URL."""
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "context-proxy",
                "metrics_path": "/metrics",
                "static_configs": [{"targets": [scrape]}],
            }
        ],
    }
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    with held_port() as port:
        command = [
            binary,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        url = f"http://127.0.0.1:{port}"
        with running_server(command, url + "/-/ready", seconds=20):
            yield url


def query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    """Run an instant query; fail on any PromQL error."""
    response = httpx.get(prometheus + "/api/v1/query", params={"query": expr}, timeout=10)
    body = response.json()
    assert response.status_code == 200 and body["status"] == "success", f"{expr}: {body}"
    return list(body["data"]["result"])


def last_scrape(prometheus: str) -> float:
    """Unix time of the newest scrape of the proxy."""
    return max((float(s["value"][1]) for s in query(prometheus, "timestamp(up)")), default=0.0)


def wait_for(
    condition: Callable[[], bool], seconds: float, what: str, tick: Callable[[], None]
) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        tick()
        time.sleep(0.5)


def is_summarizer(body: dict[str, Any]) -> bool:
    return asks_summary(body)


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def client(url: str, session: str | None = None) -> openai.OpenAI:
    headers = {"X-Session-Id": session} if session else {}
    return openai.OpenAI(
        base_url=url + "/v1", api_key="client-key", max_retries=0, default_headers=headers
    )


def long_session(url: str, session: str, turns: int) -> None:
    """A conversation that outgrows the 1,000-token window, so the proxy compresses it."""
    sdk = client(url, session)
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        messages.append({"role": "user", "content": words(90, f"{session}{turn}w")})
        reply = sdk.chat.completions.create(model=MODEL, messages=messages)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})


def plain_and_streaming(url: str) -> None:
    sdk = client(url)
    sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello"}])
    stream = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "count to five"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    for _ in stream:
        pass
    # The other doors, plain and streaming.
    claude = anthropic.Anthropic(base_url=url, api_key="client-key", max_retries=0)
    for stream_it in (False, True):
        request = {"role": "user", "content": "hello"}
        body = {"model": MODEL, "max_tokens": 20, "messages": [request], "stream": stream_it}
        for answer in (
            claude.messages.create(**body),
            sdk.responses.create(model=MODEL, input="hello", stream=stream_it),
        ):
            if stream_it:
                list(answer)


def test_every_panel_query_runs_on_real_prometheus(
    upstream: FakeUpstream,
    start_proxy: Callable[[dict[str, Any]], str],
    tmp_path: Path,
) -> None:
    binary = prometheus_binary()
    config = proxy_config(upstream)
    config["model_list"][0]["model_info"] = {"max_input_tokens": 1000}
    # A model with no known input limit: its budget uses context.default_context_window.
    unknown = {**config["model_list"][0], "model_name": UNKNOWN_LIMIT_MODEL}
    unknown["litellm_params"] = {**unknown["litellm_params"], "model": "openai/no-known-limit"}
    del unknown["model_info"]
    config["model_list"].append(unknown)
    url = start_proxy(config)
    failing_summaries = {"on": False}

    def respond(body: dict[str, Any]) -> str | Reply:
        if not is_summarizer(body):
            return "noted"
        if failing_summaries["on"]:
            return Reply(status=500, error_message="summarizer down")
        return "The user shared notes."

    upstream.default = Reply(respond=respond)
    assert httpx.get(url + "/metrics").status_code == 200

    workdir = tmp_path / "prometheus"
    workdir.mkdir()
    with running_prometheus(binary, url.removeprefix("http://"), workdir) as prometheus:
        wait_for(
            lambda: any(s["value"][1] == "1" for s in query(prometheus, "up")),
            15,
            "the proxy target to be up",
            tick=lambda: None,
        )
        # Traffic spread over several scrapes, so rate() has samples on both sides.
        plain_and_streaming(url)
        with pytest.raises(openai.NotFoundError):
            client(url).chat.completions.create(
                model="no-such-model", messages=[{"role": "user", "content": "hi"}]
            )
        upstream.queue(Reply(status=500, error_message="upstream broke"))
        with pytest.raises(openai.APIStatusError):
            client(url).chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "fail"}]
            )
        client(url).chat.completions.create(
            model=UNKNOWN_LIMIT_MODEL, messages=[{"role": "user", "content": "hi"}]
        )
        long_session(url, "dash-summary", turns=8)
        # A session whose summaries fail: the proxy falls back to truncation.
        failing_summaries["on"] = True
        long_session(url, "dash-fallback", turns=5)
        failing_summaries["on"] = False

        core = {
            key: [expr for name, title, expr in panel_exprs() if (name, title) == key]
            for key in CORE_PANELS
        }
        assert all(core.values()), f"core panels missing: {core}"

        def core_has_data() -> bool:
            for key, exprs in core.items():
                results = [s["metric"] for expr in exprs for s in query(prometheus, concrete(expr))]
                if not all(any(matches(r, w) for r in results) for w in CORE_PANELS[key]):
                    return False
            return True

        wait_for(
            core_has_data, 30, "core panels to show data", tick=lambda: plain_and_streaming(url)
        )
        # Two more scrapes, so series first seen at the end of the traffic have 2 samples too.
        traffic_end = time.time()
        wait_for(
            lambda: last_scrape(prometheus) > traffic_end + 1.2, 10, "two scrapes", lambda: None
        )

        empty: list[str] = []
        for name, title, expr in panel_exprs():
            if not query(prometheus, concrete(expr)):
                empty.append(f"{name}/{title}: {expr}")
        # Informational (shown with -rP or -s): some series only exist after rare events.
        if empty:
            print("panel queries with no data:", *empty, sep="\n  ")
