"""Prometheus telemetry (issue 11): /metrics of a real router process after
real requests through the official `openai` SDK to a fake backend, parsed
with prometheus_client's own text-format parser.

- the request, token, TTFT, upstream and inter-token series equal what was
  sent and what the fake reported (its usage, the chunks the client got);
- every histogram is consistent (cumulative buckets, +Inf = count, sum ≥ 0);
- 10,000 distinct backend names give at most cap + 1 label values;
- the Grafana dashboard JSON loads, has the fields Grafana's dashboard model
  needs, and every panel's PromQL names a metric the router exports;
- the Prometheus scrape example parses and scrapes /metrics;
- with several uvicorn workers (runnode --workers 2) every scrape, whichever
  worker answers it, reports the whole node's counts.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import defaultdict
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from router import observe
from router.core.health import StateTable
from tests.keys.e2e import create_key
from tests.support.nodeproc import NodeProc
from tests.support.routerproc import ROOT, RouterProc, wait_until

CHUNK_DELAY_S = 0.15  # between the fake's stream frames: each reaches the router (and the client) alone
PIECES = 3
PLAIN, STREAMS = 3, 2
MESSAGES = [{"role": "user", "content": "count the tokens of this prompt please"}]

Samples = dict[tuple[str, frozenset], float]


def parse(text: str) -> tuple[dict[str, str], Samples]:
    """(family name → type, (sample name, labels) → value) of a scrape."""
    types: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return types, samples


SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def exported_names(text: str) -> set[str]:
    """Every sample name the scrape declares (by its TYPE line, also for a
    labelled metric with no series yet) or carries."""
    types, samples = parse(text)
    names = {name for name, _ in samples}
    for family, kind in types.items():
        names.update(family + suffix for suffix in SUFFIXES.get(kind, ("",)))
    return names


def value(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def scrape(url: str) -> str:
    response = httpx.get(url + "/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


@pytest.fixture(scope="module")
def traffic():
    """One router, one fake backend, an operator key; PLAIN plain and STREAMS
    streamed chats through the SDK. Yields what the client saw and a scrape
    taken once the drainer counted all of them."""
    from fakes import openai_backend

    backend = openai_backend.server_thread("fake-a", ["m"]).start()
    backend.behavior.chunks = PIECES
    backend.behavior.chunk_delay_s = CHUNK_DELAY_S
    router = RouterProc(
        f"api_keys: {{mode: blocking}}\nbackends:\n  - {{name: fake-a, url: '{backend.url}', models: [m]}}\n"
    ).start()
    try:
        key = create_key(router, "--models", "m")
        client = openai.OpenAI(base_url=router.url + "/v1", api_key=key, max_retries=0, timeout=30)
        seen = {"prompt": 0, "completion": 0, "chunks": []}
        for _ in range(PLAIN):
            reply = client.chat.completions.create(model="m", messages=MESSAGES)
            assert reply.usage is not None
            seen["prompt"] += reply.usage.prompt_tokens
            seen["completion"] += reply.usage.completion_tokens
        for _ in range(STREAMS):
            stream = client.chat.completions.create(
                model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
            )
            chunks = list(stream)
            usage = chunks[-1].usage
            assert usage is not None
            seen["prompt"] += usage.prompt_tokens
            seen["completion"] += usage.completion_tokens
            seen["chunks"].append(len(chunks) + 1)  # + the `data: [DONE]` frame the SDK does not yield
        total = PLAIN + STREAMS

        def counted():
            text = scrape(router.url)
            return text if value(parse(text)[1], "router_requests_total", model="m") >= total else None

        text = wait_until(counted, 30, what=f"{total} requests counted")
        yield router, seen, text
    finally:
        router.stop()
        backend.stop()


def test_counts_equal_what_was_sent_and_reported(traffic):
    _, seen, text = traffic
    types, samples = parse(text)
    labels = {"model": "m", "provider": "fake-a", "key_source": "operator"}
    assert value(samples, "router_requests_total", **labels, status="200") == PLAIN + STREAMS
    assert value(samples, "router_requests_total", model="m") == PLAIN + STREAMS
    tokens = {"model": "m", "backend": "fake-a", "key_source": "operator"}
    assert seen["prompt"] > 0 and seen["completion"] > 0
    assert value(samples, "router_prompt_tokens_total", **tokens) == seen["prompt"]
    assert value(samples, "router_completion_tokens_total", **tokens) == seen["completion"]
    # the raw usage-field counter the earlier dashboards read still counts the same
    assert value(samples, "router_tokens_total", model="m", kind="prompt_tokens") == seen["prompt"]
    assert value(samples, "router_ttft_seconds_count", model="m", backend="fake-a") == STREAMS
    assert value(samples, "router_upstream_seconds_count", backend="fake-a") == PLAIN + STREAMS
    assert value(samples, "router_request_seconds_count", model="m") == PLAIN + STREAMS
    assert types["router_backend_in_flight"] == "gauge"
    assert value(samples, "router_backend_in_flight", backend="fake-a") == 0


def test_inter_token_histogram_counts_the_gaps_of_each_stream(traffic):
    _, seen, text = traffic
    _, samples = parse(text)
    gaps = sum(n - 1 for n in seen["chunks"])
    assert len(seen["chunks"]) == STREAMS and gaps >= STREAMS * (PIECES + 1)
    assert value(samples, "router_inter_token_seconds_count", model="m") == gaps
    # the fake waits CHUNK_DELAY_S before every frame but the first: the gaps add up to about that
    total = value(samples, "router_inter_token_seconds_sum", model="m")
    assert gaps * CHUNK_DELAY_S * 0.8 <= total <= gaps * CHUNK_DELAY_S * 5
    below = value(samples, "router_inter_token_seconds_bucket", model="m", le="0.1")
    assert below < gaps  # most gaps are CHUNK_DELAY_S long, above the 0.1 s bucket


def test_histograms_are_consistent(traffic):
    _, _, text = traffic
    types, samples = parse(text)
    histograms = [name for name, kind in types.items() if kind == "histogram"]
    assert {
        "router_ttft_seconds",
        "router_inter_token_seconds",
        "router_upstream_seconds",
        "router_request_seconds",
    } <= set(histograms)
    checked = 0
    for name in histograms:
        series: dict[frozenset, list[tuple[float, float]]] = defaultdict(list)
        for (sample, labels), v in samples.items():
            if sample == name + "_bucket":
                le = dict(labels)["le"]
                series[frozenset(kv for kv in labels if kv[0] != "le")].append((float(le), v))
        for labels, buckets in series.items():
            buckets.sort()
            counts = [c for _, c in buckets]
            assert counts == sorted(counts), (name, labels, buckets)
            assert buckets[-1][0] == float("inf")
            assert samples[(name + "_count", labels)] == counts[-1]
            assert samples[(name + "_sum", labels)] >= 0
            checked += 1
    assert checked >= 4


def test_backend_labels_are_capped(monkeypatch):
    """10,000 distinct backend names (ROUTER mode: the coordinator's) give at
    most MAX_BACKENDS + 1 label values; the rest count under `other`."""
    monkeypatch.setattr(observe, "_backends", set())
    model = "cap-" + uuid.uuid4().hex[:8]
    n = 10_000
    for i in range(n):
        observe._emit(
            {
                "label": model,
                "provider": f"backend-{i}",
                "status": 200,
                "path": "p",
                "key_source": "coordinator",
                "usage": {"prompt_tokens": 1},
                "upstream_ms": 1.0,
            }
        )
    states = StateTable()
    for i in range(n):
        states.get(f"backend-{i}").in_flight = 1
    observe.refresh_in_flight(states)
    from prometheus_client import REGISTRY

    _, samples = parse(generate_latest(REGISTRY).decode())
    mine = [
        dict(ls) for (name, ls), _ in samples.items() if name == "router_requests_total" and dict(ls)["model"] == model
    ]
    backends = {ls["provider"] for ls in mine}
    assert len(backends) == observe.MAX_BACKENDS + 1 and "other" in backends
    assert value(samples, "router_requests_total", model=model) == n
    assert value(samples, "router_requests_total", model=model, provider="other") == n - observe.MAX_BACKENDS
    assert value(samples, "router_prompt_tokens_total", model=model) == n
    in_flight = {dict(ls)["backend"] for (name, ls), _ in samples.items() if name == "router_backend_in_flight"}
    assert len(in_flight) <= observe.MAX_BACKENDS + 1
    assert value(samples, "router_backend_in_flight") == n  # `other` sums the rest
    upstream = {dict(ls)["backend"] for (name, ls), _ in samples.items() if name == "router_upstream_seconds_count"}
    assert len(upstream) <= observe.MAX_BACKENDS + 1


# -- the shipped Grafana dashboard and scrape example ---------------------------

DASHBOARD = ROOT / "docs" / "grafana" / "router-dashboard.json"
SCRAPE = ROOT / "docs" / "prometheus" / "prometheus.yml"
PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "and",
    "or",
    "unless",
    "sum",
    "rate",
    "irate",
    "increase",
    "histogram_quantile",
    "avg",
    "max",
    "min",
    "count",
    "topk",
    "clamp_min",
    "label_replace",
    "vector",
    "inf",
    "nan",
}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors ($__rate_interval, 5m)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for match in re.finditer(r"(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\()?", expr):
        word, call = match.group(1), match.group(2)
        if not call and word.lower() not in PROMQL_WORDS:
            names.add(word)
    return names


def test_metric_names_parser():
    assert metric_names(
        'histogram_quantile(0.95, sum by (le, model) (rate(router_ttft_seconds_bucket{model=~"$model"}[$__rate_interval])))'
    ) == {"router_ttft_seconds_bucket"}
    assert metric_names("sum(rate(a_total[5m])) / clamp_min(sum(rate(b_total[5m])), 1)") == {"a_total", "b_total"}


def _panels(dashboard: dict) -> list[dict]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # collapsed rows keep theirs inside
    return [p for p in out if p.get("type") != "row"]


def test_grafana_dashboard_loads_and_queries_exported_metrics(traffic):
    _, _, text = traffic
    dashboard = json.loads(DASHBOARD.read_text())
    assert isinstance(dashboard["title"], str) and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    exported = exported_names(text)
    for variable in variables.values():
        if variable["type"] == "query":
            metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["query"]["query"]).groups()
            assert metric in exported and label in {k for (n, ls) in parse(text)[1] if n == metric for k, _ in ls}
    panels = _panels(dashboard)
    assert len(panels) >= 8
    titles = " | ".join(p["title"].lower() for p in panels)
    for needed in ("request rate", "error", "latency", "time to first token", "inter-token", "tokens/s", "in flight"):
        assert needed in titles, needed
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["type"] in {"timeseries", "stat", "gauge", "bargauge", "table"}, panel["type"]
        assert panel["datasource"]["uid"] == "${datasource}"
        assert {"h", "w", "x", "y"} <= panel["gridPos"].keys()
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, target["expr"]
            assert names <= exported, (panel["title"], names - exported)
            assert target["refId"]


def test_prometheus_scrape_example():
    config = yaml.safe_load(SCRAPE.read_text())
    jobs = config["scrape_configs"]
    assert jobs and all(job.get("metrics_path", "/metrics") == "/metrics" for job in jobs)
    for job in jobs:
        assert job["job_name"]
        targets = [t for sc in job["static_configs"] for t in sc["targets"]]
        assert targets and all(re.fullmatch(r"[\w.-]+:\d+", t) for t in targets)


# -- several workers -----------------------------------------------------------


def test_every_worker_scrape_reports_the_whole_node(openai_backends):
    """runnode --workers 2: requests land on either worker, every scrape
    (whichever worker answers) reports all of them; a stale file of an earlier
    run is removed at node start."""
    (a,) = openai_backends("a")
    node = NodeProc(
        args=("--workers", "2", "--no-tasks"),
        env={"ROUTER_REDIS_PREFIX": f"t{uuid.uuid4().hex[:10]}:"},
        config=f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n",
    )
    metrics_dir = Path(node.dir) / "prometheus-multiproc"
    metrics_dir.mkdir()
    stale = metrics_dir / "counter_1.db"
    stale.write_bytes(b"left over from an earlier run")
    node.env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    node.start()
    try:
        assert not stale.exists()
        n = 20
        for _ in range(n):  # a new connection each: the kernel spreads them over the workers
            client = openai.OpenAI(base_url=node.url + "/v1", api_key="none", max_retries=0, timeout=30)
            client.chat.completions.create(model="m", messages=MESSAGES)
            client.close()
        wait_until(lambda: len(list(metrics_dir.glob("counter_*.db"))) >= 2, 30, what="both workers' files")

        def all_counted():
            return value(parse(scrape(node.url))[1], "router_requests_total", model="m", status="200") == n

        wait_until(all_counted, 30, what=f"{n} requests on /metrics")
        for _ in range(10):  # each on a new connection, so on either worker
            assert value(parse(scrape(node.url))[1], "router_requests_total", model="m", status="200") == n

        # A stream held open on one worker: each worker publishes its own
        # in-flight values (no scrape needed), so every scrape shows it.
        a.behavior.chunk_delay_s = 1.0
        client = openai.OpenAI(base_url=node.url + "/v1", api_key="none", max_retries=0, timeout=60)
        stream = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        assert next(iter(stream)).choices

        def published() -> float:  # the workers' files as /metrics would sum them, read without a scrape
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=str(metrics_dir))
            return value(parse(generate_latest(registry).decode())[1], "router_backend_in_flight", backend="a")

        wait_until(lambda: published() == 1, 10, what="the open stream published as in flight")
        seen = [value(parse(scrape(node.url))[1], "router_backend_in_flight", backend="a") for _ in range(8)]
        assert seen == [1] * 8, seen
        assert list(stream)
        wait_until(lambda: published() == 0, 10, what="the ended stream published as no longer in flight")
    finally:
        node.stop()
