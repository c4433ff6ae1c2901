"""ROUTER worker metrics (appproxy.router_mode.metrics): the writers count into
the node's Redis hash, the web process's collector turns it into series on
/metrics — only while appproxy_router is enabled. Real Redis (an isolated
prefix), real DB rows, the real /metrics view."""

from __future__ import annotations

import uuid

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from redis.exceptions import RedisError

from appproxy.models import WorkerState
from appproxy.router_mode import metrics as router_metrics
from appproxy.router_mode.metrics import BUCKETS, record_event, record_pull, record_revision
from router.models import ConfigDocument
from router.redis import sync_client

pytestmark = pytest.mark.django_db(transaction=True)

AUTHORITY = "continuum-router-1"
NODE_ID = "b3f1c0de-0000-4000-8000-0000000000aa"


@pytest.fixture(autouse=True)
def redis_prefix(settings, monkeypatch):
    prefix = f"test:router-metrics:{uuid.uuid4().hex}:"
    settings.ROUTER_REDIS_PREFIX = prefix
    monkeypatch.setenv("APPPROXY_NODE_ID", NODE_ID)
    yield prefix
    try:
        keys = list(sync_client().scan_iter(match=prefix + "*"))
        if keys:
            sync_client().delete(*keys)
    except RedisError:
        pass


@pytest.fixture(autouse=True)
def fresh_router_settings(monkeypatch):
    from appproxy.router_mode import config as router_config

    monkeypatch.setattr(router_config, "_cache", {"key": None, "value": None})


def _document(enabled: bool) -> None:
    doc: dict = {}
    if enabled:
        doc["appproxy_router"] = {
            "enabled": True,
            "coordinator_url": "http://coordinator.test:10200",
            "api_secret": "metrics-test-secret",
            "authority": AUTHORITY,
            "hostname": "router.test",
        }
    ConfigDocument.objects.update_or_create(
        pk=1, defaults={"path": "/etc/router/router.yaml", "digest": uuid.uuid4().hex, "document": doc}
    )


@pytest.fixture
def router_on(db):
    _document(True)


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _scrape_collector() -> dict:
    registry = CollectorRegistry()
    registry.register(router_metrics.RouterCollector())  # type: ignore[arg-type]
    return _families(generate_latest(registry).decode())


def _scrape(client) -> dict:
    resp = client.get("/metrics")
    assert resp.status_code == 200
    return _families(resp.content.decode())


def _samples(family, name: str | None = None) -> dict[tuple, float]:
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples if name is None or s.name == name}


def test_pulls_are_counted_by_result(client, router_on):
    for result in ("200", "304", "304", "304", "error", "418"):
        record_pull(result)
    families = _scrape(client)
    pulls = _samples(families["appproxy_router_pulls"], "appproxy_router_pulls_total")
    assert pulls == {
        (("result", "200"),): 1.0,
        (("result", "304"),): 3.0,
        (("result", "error"),): 1.0,
        (("result", "other"),): 1.0,
    }


def test_every_pull_result_is_present_from_zero(router_on):
    pulls = _samples(_scrape_collector()["appproxy_router_pulls"], "appproxy_router_pulls_total")
    assert pulls == {(("result", r),): 0.0 for r in ("200", "304", "error")}


def test_events_are_counted_with_bounded_labels(router_on):
    record_event("appproxy_router_key_updated_event", True, 0.04, 0.055)
    record_event("key_updated", True, 0.2, 0.3)
    record_event("appproxy_router_model_removed_event", False, None, None)
    record_event("appproxy_router_something_new_event", True, 0.001, None)
    record_event("'; DROP TABLE", True, None, None)
    events = _samples(_scrape_collector()["appproxy_router_events"], "appproxy_router_events_total")
    assert events == {
        (("event", "key_updated"), ("result", "ok")): 2.0,
        (("event", "model_removed"), ("result", "error")): 1.0,
        (("event", "other"), ("result", "ok")): 2.0,
    }


def test_apply_and_ack_latencies_are_histograms(client, router_on):
    record_event("appproxy_router_key_updated_event", True, 0.04, 0.055)
    record_event("appproxy_router_key_updated_event", True, 0.2, 12.0)
    record_event("appproxy_router_key_updated_event", True, 0.3, None)  # not acked: no ack observation
    record_event("appproxy_router_model_updated_event", True, 120.0, float("nan"))
    families = _scrape(client)

    apply = families["appproxy_router_event_apply_seconds"]
    assert apply.type == "histogram"
    buckets = {
        (s.labels["event"], s.labels["le"]): s.value
        for s in apply.samples
        if s.name == "appproxy_router_event_apply_seconds_bucket"
    }
    assert buckets[("key_updated", "0.025")] == 0
    assert buckets[("key_updated", "0.05")] == 1
    assert buckets[("key_updated", "0.25")] == 2
    assert buckets[("key_updated", "0.5")] == 3
    assert buckets[("key_updated", "+Inf")] == 3
    assert buckets[("model_updated", "60.0")] == 0 and buckets[("model_updated", "+Inf")] == 1
    assert {le for (_, le) in buckets} == {*(str(float(b)) for b in BUCKETS), "+Inf"}
    counts = _samples(apply, "appproxy_router_event_apply_seconds_count")
    sums = _samples(apply, "appproxy_router_event_apply_seconds_sum")
    assert counts == {(("event", "key_updated"),): 3.0, (("event", "model_updated"),): 1.0}
    assert sums[(("event", "key_updated"),)] == pytest.approx(0.54)

    ack = families["appproxy_router_event_ack_seconds"]
    ack_counts = _samples(ack, "appproxy_router_event_ack_seconds_count")
    assert ack_counts == {(("event", "key_updated"),): 2.0}  # NaN and None are not observed
    ack_buckets = {
        s.labels["le"]: s.value
        for s in ack.samples
        if s.name == "appproxy_router_event_ack_seconds_bucket" and s.labels["event"] == "key_updated"
    }
    assert (ack_buckets["0.05"], ack_buckets["0.1"], ack_buckets["10.0"], ack_buckets["15.0"]) == (0, 1, 1, 2)
    assert _samples(ack, "appproxy_router_event_ack_seconds_sum")[(("event", "key_updated"),)] == pytest.approx(12.055)


def test_the_revision_info_follows_record_revision(router_on):
    record_revision("r-41")
    record_revision("r-42")
    info = _samples(_scrape_collector()["appproxy_router_revision_info"])
    assert info == {(("revision", "r-42"),): 1.0}
    record_revision("")
    assert _samples(_scrape_collector()["appproxy_router_revision_info"]) == {}


def test_the_revision_info_falls_back_to_this_node_sessions_row(router_on):
    WorkerState.objects.create(authority=AUTHORITY, node_id=NODE_ID, mode="router", revision="r-7")
    WorkerState.objects.create(authority=AUTHORITY, node_id="another-node", mode="router", revision="r-99")
    families = _scrape_collector()
    assert _samples(families["appproxy_router_revision_info"]) == {(("revision", "r-7"),): 1.0}


def test_nothing_is_exported_while_router_mode_is_off(client, db):
    _document(False)
    record_pull("200")
    record_event("appproxy_router_key_updated_event", True, 0.1, 0.2)
    record_revision("r-1")
    text = client.get("/metrics").content.decode()
    assert "appproxy_router_" not in text
    assert "router_requests_total" in text or "python_info" in text  # /metrics itself still answers
    assert _scrape_collector() == {}


def test_the_collector_is_registered_once_on_the_default_registry(client, router_on):
    from prometheus_client import REGISTRY

    before = list(REGISTRY._collector_to_names)
    router_metrics.register()
    router_metrics.register()
    assert list(REGISTRY._collector_to_names) == before
    assert router_metrics.COLLECTOR in REGISTRY._collector_to_names
    assert sum(1 for f in _scrape(client) if f == "appproxy_router_pulls") == 1


def _broken_redis(monkeypatch):
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    broken = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    monkeypatch.setattr(router_metrics, "sync_client", lambda: broken)


def test_the_writers_never_raise_when_redis_is_down(router_on, monkeypatch):
    _broken_redis(monkeypatch)
    record_pull("200")
    record_event("appproxy_router_model_updated_event", True, 0.1, 0.2)
    record_revision("r-1")


def test_metrics_still_answer_when_redis_is_down(client, router_on, monkeypatch):
    record_pull("200")
    _broken_redis(monkeypatch)
    resp = client.get("/metrics")
    assert resp.status_code == 200
    assert "appproxy_router_" not in resp.content.decode()


def test_a_foreign_field_in_the_hash_is_ignored(router_on):
    key = router_metrics.metrics_key()
    sync_client().hset(key, mapping={"pulls|200": "2", "junk": "x", "events|bogus|ok": "1", "apply|x|bucket|99": "3"})
    families = _scrape_collector()
    assert _samples(families["appproxy_router_pulls"], "appproxy_router_pulls_total")[(("result", "200"),)] == 2.0
    events = _samples(families["appproxy_router_events"], "appproxy_router_events_total")
    assert events == {(("event", "other"), ("result", "ok")): 1.0}


def test_the_hash_is_the_nodes(router_on, settings):
    record_pull("304")
    key = router_metrics.metrics_key()
    assert key.startswith(settings.ROUTER_REDIS_PREFIX) and key.endswith(settings.ROUTER_NODE_ID)
    assert sync_client().hget(key, "pulls|304") == b"1"
