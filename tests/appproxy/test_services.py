"""The apply path (reconcile_apply, events, ingress compile) on a real DB and
real Redis (lock, change notice), with fake replicas for model discovery."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

import pytest

from appproxy import events
from appproxy.envelope import CREATED, REMOVED, ROUTE_UPDATED, decode, encode_event
from appproxy.legacy import discovery
from appproxy.legacy.config import parse_section
from appproxy.legacy.selectors import compile_ingress
from appproxy.legacy.services import reconcile_apply
from appproxy.models import Circuit, EventRecord, Route, WorkerState
from appproxy.wire import Circuit as WireCircuit
from router.models import Backend, Source
from router.revision import current_revision
from tests.support.routerproc import free_port

pytestmark = pytest.mark.django_db(transaction=True)

AUTHORITY = "w-services"


@pytest.fixture(autouse=True)
def isolated(settings):
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    settings.ROUTER_REDIS_PREFIX = prefix
    settings.ROUTER_NOTICE_CHANNEL = prefix + "notice"
    with discovery._lock:
        discovery._memory.clear()


def route(server=None, *, port: int | None = None, ratio: float = 1.0) -> dict:
    if server is not None:
        parts = urlsplit(server.url)
        host, port = parts.hostname, parts.port
    else:
        host = "127.0.0.1"
    return {
        "route_id": str(uuid.uuid4()),
        "session_id": str(uuid.uuid4()),
        "kernel_host": host,
        "kernel_port": port,
        "protocol": "http",
        "traffic_ratio": ratio,
    }


def circuit(*routes: dict, sub: str | None = None, variant: str | None = "vllm", **extra) -> dict:
    return {
        "id": str(uuid.uuid4()),
        "app": "svc",
        "protocol": "http",
        "worker": str(uuid.uuid4()),
        "app_mode": "inference",
        "frontend_mode": "wildcard",
        "envs": {},
        "arguments": None,
        "open_to_public": True,
        "allowed_client_ips": None,
        "port": None,
        "subdomain": sub or f"s{uuid.uuid4().hex[:6]}",
        "user_id": None,
        "endpoint_id": str(uuid.uuid4()),
        "runtime_variant": variant,
        "route_info": list(routes),
        "session_ids": [],
        "created_at": "2026-08-10T01:02:03.456789Z",
        "updated_at": "2026-08-10T01:02:03.456789Z",
        **extra,
    }


def apply(*raws: dict, **kw):
    kw.setdefault("source", "test")
    return reconcile_apply(
        [WireCircuit.model_validate(r) for r in raws], authority=AUTHORITY, discovery_timeout=1, **kw
    )


def ours() -> dict[str, Backend]:
    return {b.name: b for b in Backend.objects.filter(source=Source.APPPROXY)}


def test_one_backend_per_route_named_and_weighted(openai_backends):
    a, b = openai_backends("ra", "rb", models=("llama-3",))
    raw = circuit(route(a), route(b, ratio=2.5))
    result = apply(raw)
    assert result.changed and len(result.plan.add) == 2
    rows = ours()
    expected = {f"appproxy-{raw['id']}-r{r['route_id']}" for r in raw["route_info"]}
    assert set(rows) == expected
    by_url = {row.url: row for row in rows.values()}
    assert by_url[a.url].weight == 100 and by_url[b.url].weight == 250
    assert all(row.kind == "vllm" and row.models == ["llama-3"] for row in rows.values())
    mirrored = Circuit.objects.get(circuit_id=raw["id"])
    assert mirrored.model == "llama-3" and mirrored.raw == raw
    assert set(Route.objects.filter(circuit=mirrored).values_list("backend_name", flat=True)) == expected


def test_idempotent_and_other_sources_untouched(openai_backends):
    (a,) = openai_backends("ra", models=("m",))
    Backend.objects.create(name="cfg", source=Source.CONFIG, url="http://x:1", models=["m"])
    raw = circuit(route(a))
    name = f"appproxy-{raw['id']}-r{raw['route_info'][0]['route_id']}"
    Backend.objects.create(name=name, source=Source.ADMIN, url="http://admin:1", models=["m"])
    first = apply(raw)
    assert first.plan.conflicts == (name,)
    revision = current_revision()
    again = apply(raw)
    assert not again.changed and current_revision() == revision  # no bump for nothing
    assert Backend.objects.get(name=name).source == Source.ADMIN  # never taken over
    apply(full=True)  # an empty pull removes every circuit, and only our rows
    assert not Circuit.objects.exists()
    assert set(Backend.objects.values_list("name", flat=True)) == {"cfg", name}


def test_clear_mirror_when_disabled(openai_backends):
    from appproxy.reconcile import clear_mirror

    (a,) = openai_backends("ra", models=("m",))
    Backend.objects.create(name="cfg", source=Source.CONFIG, url="http://x:1", models=["m"])
    apply(circuit(route(a)))
    assert clear_mirror().changed
    assert not Circuit.objects.exists() and not ours()
    assert Backend.objects.filter(name="cfg").exists()
    assert clear_mirror() is None  # nothing left: no lock, no bump


def test_full_pull_removes_missing_but_keeps_unparseable(openai_backends):
    (a,) = openai_backends("ra", models=("m",))
    keep, drop, stay = circuit(route(a)), circuit(route(a)), circuit(route(a))
    apply(keep, drop, stay)
    assert len(ours()) == 3
    from appproxy.legacy.services import DESIRE
    from appproxy.reconcile import apply_locked

    apply_locked(
        [WireCircuit.model_validate(stay)], {}, source="pull", authority=AUTHORITY, full=True, keep={keep["id"]}, desire=DESIRE
    )
    assert set(Circuit.objects.values_list("circuit_id", flat=True)) == {keep["id"], stay["id"]}
    assert not [n for n in ours() if drop["id"] in n]


def test_unreachable_replica_keeps_circuit_without_backends_then_discovers(openai_backends):
    (a,) = openai_backends("late", models=("late-model",))
    port = urlsplit(a.url).port
    a.stop()
    raw = circuit(route(port=port))
    apply(raw)
    row = Circuit.objects.get(circuit_id=raw["id"])
    assert row.model == "" and not ours()
    ingress = compile_ingress(_cfg())
    entry = ingress.table[raw["subdomain"]]
    assert entry.model is None and entry.has_routes
    a.start()
    apply(raw)  # the next reconcile asks again
    assert Circuit.objects.get(circuit_id=raw["id"]).model == "late-model"
    assert len(ours()) == 1


def test_model_cached_by_endpoint(openai_backends):
    """Once known, an endpoint's model is not asked again (its replica may be gone)."""
    (a,) = openai_backends("ra", models=("cached",))
    raw = circuit(route(a))
    apply(raw)
    a.stop()
    moved = {**raw, "route_info": [route(port=free_port())], "updated_at": "2026-08-10T02:00:00Z"}
    apply(moved)
    assert [b.models for b in ours().values()] == [["cached"]]


def test_events_created_route_updated_removed(openai_backends):
    (a,) = openai_backends("ra", models=("ev",))
    settings = _settings()
    WorkerState.objects.create(authority=AUTHORITY, node_id="node-1")  # registered
    raw = circuit(extra_field_from_the_future={"x": 1})
    created = decode(encode_event(CREATED, "args", authority=AUTHORITY, circuits=[raw]))
    outcome = events.apply_event(created, settings)
    assert outcome.ack == [raw]  # echoed exactly as received, unknown fields too
    assert Circuit.objects.filter(circuit_id=raw["id"]).exists() and not ours()

    routes = [route(a)]
    updated = decode(encode_event(ROUTE_UPDATED, "payload", authority=AUTHORITY, circuit=raw, routes=routes))
    events.apply_event(updated, settings)
    assert len(ours()) == 1
    stored = Circuit.objects.get(circuit_id=raw["id"]).raw["route_info"]
    assert [{k: r[k] for k in routes[0]} for r in stored] == routes  # snake_case, full set

    removed = decode(encode_event(REMOVED, "payload", authority=AUTHORITY, circuits=[raw]))
    events.apply_event(removed, settings)
    assert not Circuit.objects.exists() and not ours()
    assert WorkerState.objects.get(authority=AUTHORITY).circuits == 0


def test_route_updated_with_bad_routes_is_rejected():
    raw = circuit()
    event = decode(
        encode_event(ROUTE_UPDATED, "payload", authority=AUTHORITY, circuit=raw, routes=[{"kernel_port": 0}])
    )
    with pytest.raises(events.EventRejected):
        events.apply_event(event, _settings())


def test_event_records_are_pruned(monkeypatch):
    from django.utils import timezone

    monkeypatch.setattr(events, "KEEP", 5)
    monkeypatch.setattr(events, "_PRUNE_EVERY", 1)
    for i in range(12):
        events.record_event(name=f"e{i}", received_at=timezone.now(), ok=True)
    names = list(EventRecord.objects.values_list("name", flat=True))
    assert len(names) <= 6 and names[0] == "e11"


def test_compile_ingress_carries_readiness():
    assert compile_ingress(_cfg(enabled=False)) is None
    ingress = compile_ingress(_cfg())
    assert not ingress.registered and not ingress.first_pull_applied
    WorkerState.objects.create(authority=AUTHORITY, worker_id=str(uuid.uuid4()), first_pull_applied=True)
    ingress = compile_ingress(_cfg())
    assert ingress.registered and ingress.first_pull_applied and ingress.authority == AUTHORITY


SECTION = {
    "enabled": True,
    "coordinator_url": "http://127.0.0.1:1",
    "api_secret": "a" * 40,
    "jwt_secret": "j" * 40,
    "authority": AUTHORITY,
    "hostname": "h",
    "wildcard_domain": ".models.test",
}


def _settings():
    return parse_section(SECTION)


def _cfg(enabled: bool = True):
    from types import SimpleNamespace

    return SimpleNamespace(appproxy={**SECTION, "enabled": enabled})


def test_a_burst_of_route_updates_is_applied_in_one_reconcile(openai_backends):
    """The events process takes what has arrived in one batch; 60 route
    updates for 3 circuits are one apply (one revision), each circuit ends
    with the routes of its last event, and every event is recorded."""
    import asyncio

    from appproxy.subscriber import Subscriber

    a, b = openai_backends("rb1", "rb2", models=("ev",))
    settings = _settings()
    WorkerState.objects.create(authority=AUTHORITY, node_id="node-1")
    raws = [circuit() for _ in range(3)]
    for raw in raws:
        events.apply_event(decode(encode_event(CREATED, "args", authority=AUTHORITY, circuits=[raw])), settings)
    before = current_revision()
    burst = [
        encode_event(
            ROUTE_UPDATED, "payload", authority=AUTHORITY, circuit=raws[i % 3],
            routes=[route(a if i % 2 else b, ratio=(i + 1) / 100)],
        )
        for i in range(60)
    ]
    asyncio.run(Subscriber().handle_batch(None, settings, burst))
    assert current_revision() == before + 1
    for k, raw in enumerate(raws):
        (stored,) = Circuit.objects.get(circuit_id=raw["id"]).raw["route_info"]
        assert stored["traffic_ratio"] == (57 + k + 1) / 100
    assert len(ours()) == 3
    assert EventRecord.objects.filter(name=ROUTE_UPDATED, ok=True, detail="one apply of 60").count() == 60


@pytest.mark.parametrize("many", [False, True])
def test_backends_of_some_circuits_are_read_alike_in_sql_and_by_name(many):
    """reconcile.actual_backends(circuits): a few circuits select their backends in SQL,
    many (a pull that found most of the mirror new) filter every mirrored
    row by name; both give exactly the backends `appproxy-<circuit>-…` and
    the names asked for."""
    from appproxy import reconcile

    cids = [str(uuid.uuid4()) for _ in range(reconcile.SCOPE_IN_SQL * 2)]
    rows = [Backend(name=f"appproxy-{cid}-r{r}", source=Source.APPPROXY, url=f"http://10.0.0.{r}:8000",
                    models=["m"]) for cid in cids for r in (1, 2)]
    rows += [Backend(name="appproxy-not-a-circuit", source=Source.APPPROXY, url="http://10.0.0.9:1"),
             Backend(name="operator-one", source=Source.ADMIN, url="http://10.0.0.8:1"),
             Backend(name=f"appproxy-{cids[0]}x-r1", source=Source.APPPROXY, url="http://10.0.0.7:1")]
    # Names next to a circuit's prefix in code-point order (SQLite reads a
    # circuit's backends as a range of names), and one in upper case.
    rows += [Backend(name=f"appproxy-{cids[1]}{tail}", source=Source.APPPROXY, url="http://10.0.0.6:1")
             for tail in ("", ",r1", ".r1", "-")]
    rows += [Backend(name=f"appproxy-{cids[2].upper()}-r1", source=Source.APPPROXY, url="http://10.0.0.5:1")]
    Backend.objects.bulk_create(rows)
    scope = cids[: reconcile.SCOPE_IN_SQL + 1] if many else cids[:3]
    got = reconcile.actual_backends(scope, ["operator-one"])
    want = {b.name for b in rows if b.name == "operator-one"
            or any(b.name.startswith(f"appproxy-{cid}-") for cid in scope)}
    assert set(got) == want
    assert got[f"appproxy-{scope[0]}-r2"].url == "http://10.0.0.2:8000"
