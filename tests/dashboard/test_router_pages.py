"""The ROUTER-mode operator pages (seed §9; reference/router-mode.md §3):
the Publications page with its Router worker panel, the coordinator keys on
the Keys page, the read-only admin, and no token hash or api_secret anywhere.

Real DB rows, real Redis (the dashboard conftest's isolated prefix), a
staff session; the routing document is ConfigDocument pk=1 as the router's
config sync writes it.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import orjson
import pytest
from django.utils import timezone

from appproxy.models import Circuit, EventRecord, Publication, WorkerState
from appproxy.reconcile import apply_locked, reconcile_lock
from appproxy.router_mode import services as router_services
from appproxy.router_mode.wire import Publication as WirePublication
from appproxy.wire import Circuit as WireCircuit
from keys.coordinator import CoordinatorKey, sync_coordinator_keys
from keys.models import ApiKey
from router.models import ConfigDocument

from .conftest import PAGES

pytestmark = pytest.mark.django_db

AUTHORITY = "continuum-router-1"
NODE_ID = "b3f1c0de-0000-4000-8000-000000000001"
OTHER_NODE = "b3f1c0de-0000-4000-8000-000000000002"
WORKER_ID = "77777777-7777-4777-8777-777777777777"
EP_A = "33333333-3333-4333-8333-333333333333"
EP_B = "44444444-4444-4444-8444-444444444444"
EP_LONELY = "55555555-5555-4555-8555-555555555555"
CIRCUIT_A = "aaaaaaaa-0000-4000-8000-00000000000a"
CIRCUIT_LONELY = "cccccccc-0000-4000-8000-00000000000c"
ROUTE_1 = "11111111-0000-4000-8000-000000000001"
ROUTE_2 = "11111111-0000-4000-8000-000000000002"
API_SECRET = "router-api-SECRET-from-the-environment"
LITERAL_SECRET = "router-api-SECRET-literal-in-yaml"
KNOWN_HASH = "5e0f" + "c0ffee" * 10


def _document(section: dict | None) -> None:
    doc: dict = {"api_keys": {"mode": "open"}}
    if section is not None:
        doc["appproxy_router"] = section
    # A fresh digest each time: appproxy_router settings are cached by it.
    ConfigDocument.objects.update_or_create(
        pk=1, defaults={"path": "/etc/router/router.yaml", "digest": uuid.uuid4().hex, "document": doc}
    )


def _section(api_secret: str = "${ROUTER_TEST_API_SECRET}") -> dict:
    return {
        "enabled": True,
        "coordinator_url": "http://coordinator.test:10200",
        "api_secret": api_secret,
        "authority": AUTHORITY,
        "hostname": "router.test",
    }


@pytest.fixture(autouse=True)
def fresh_router_settings(monkeypatch):
    """No appproxy_router settings cached by an earlier test (it keeps the
    last good section when a new one does not parse)."""
    from appproxy.router_mode import config as router_config

    monkeypatch.setattr(router_config, "_cache", {"key": None, "value": None})


@pytest.fixture
def node_id(monkeypatch):
    monkeypatch.setenv("APPPROXY_NODE_ID", NODE_ID)
    monkeypatch.setenv("ROUTER_TEST_API_SECRET", API_SECRET)
    return NODE_ID


@pytest.fixture
def router_on(db, node_id):
    _document(_section())


@pytest.fixture
def router_off(db, node_id):
    _document(None)


def _circuit(circuit_id: str, endpoint: str, *routes: tuple[str, int, float], subdomain: str = "") -> Circuit:
    raw = {
        "id": circuit_id,
        "app": "vllm",
        "app_mode": "inference",
        "frontend_mode": "router",
        "endpoint_id": endpoint,
        "runtime_variant": "vllm",
        "subdomain": subdomain or None,
        "route_info": [
            {
                "route_id": rid,
                "session_id": str(uuid.uuid4()),
                "kernel_host": "10.0.0.7",
                "kernel_port": port,
                "traffic_ratio": ratio,
            }
            for rid, port, ratio in routes
        ],
    }
    # Through the one writer path, as an event would: Circuit, Route and
    # Backend rows as the router keeps them.
    with reconcile_lock(AUTHORITY):
        apply_locked(
            [WireCircuit.model_validate(raw)],
            {},
            source="test",
            authority=AUTHORITY,
            desire=router_services.router_circuit_desire(AUTHORITY),
        )
    return Circuit.objects.get(circuit_id=circuit_id)


def _publish(model: str, *mappings: tuple[str, float], aliases=(), control_mode="manual", revision="") -> None:
    """A publication as a model event applies it (its circuits are planned again)."""
    pub = {"model": model, "aliases": list(aliases), "control_mode": control_mode}
    pub["mappings"] = [{"endpoint_id": ep, "ratio": ratio} for ep, ratio in mappings]
    router_services.apply_publication(AUTHORITY, WirePublication.model_validate(pub))
    if revision:
        Publication.objects.filter(authority=AUTHORITY, model=model).update(revision=revision)


@pytest.fixture
def populated(router_on):
    """Two nodes, three publications (serving, pending, empty), a circuit no
    publication maps, a coordinator key with a known hash, router events."""
    now = timezone.now()
    WorkerState.objects.create(
        authority=AUTHORITY,
        node_id=NODE_ID,
        worker_id=WORKER_ID,
        mode="router",
        status="registered",
        revision="r-42",
        last_pull_result="304",
        pulls_full=3,
        pulls_unchanged=17,
        registered_at=now - timedelta(minutes=5),
        last_heartbeat_at=now - timedelta(seconds=4),
        last_pull_at=now - timedelta(seconds=2),
        first_pull_applied=True,
    )
    WorkerState.objects.create(
        authority=AUTHORITY,
        node_id=OTHER_NODE,
        worker_id="88888888-8888-4888-8888-888888888888",
        mode="router",
        status="registered",
        last_heartbeat_at=now - timedelta(seconds=9),
    )
    _circuit(CIRCUIT_A, EP_A, (ROUTE_1, 8001, 1.0), (ROUTE_2, 8002, 0.5), subdomain="llama")
    _circuit(CIRCUIT_LONELY, EP_LONELY, (str(uuid.uuid4()), 8009, 1.0), subdomain="lonely")
    _publish("llama-4-chat", (EP_A, 0.7), (EP_B, 0.3), aliases=["llama-4"], revision="r-42")
    _publish("qwen-coder", (EP_B, 1.0), revision="r-41")
    _publish("empty-model", control_mode="strategy_managed")
    sync_coordinator_keys(
        [CoordinatorKey(key_id="key-abc", key_hash=KNOWN_HASH, allowed_models=("llama-4",), hint="sk-…c0de")],
        full=True,
    )
    EventRecord.objects.create(
        name="appproxy_router_key_updated_event",
        fmt="args",
        authority=AUTHORITY,
        circuit_ids=["key-abc"],
        received_at=now - timedelta(seconds=3),
        applied_at=now - timedelta(seconds=3) + timedelta(milliseconds=40),
        acked_at=now - timedelta(seconds=3) + timedelta(milliseconds=55),
        ok=True,
    )
    EventRecord.objects.create(
        name="appproxy_router_model_updated_event",
        fmt="payload",
        authority=AUTHORITY,
        circuit_ids=["llama-4-chat"],
        received_at=now - timedelta(seconds=1),
        ok=False,
        detail="apply failed",
    )
    EventRecord.objects.create(
        name="appproxy_circuit_created_event", fmt="args", authority="other", circuit_ids=[], received_at=now
    )


def _sections(client, url: str = "/dashboard/publications/") -> dict:
    return client.get(url).context["sections"]


# -- the Publications page -------------------------------------------------------
def test_publications_is_in_the_nav_while_router_mode_is_on(staff, router_on):
    nav = [item["slug"] for item in staff.get("/dashboard/").context["nav"]]
    assert {"publications", "circuits", "events"} <= set(nav)


def test_publications_leaves_the_nav_while_router_mode_is_off_and_still_answers(staff, router_off):
    nav = [item["slug"] for item in staff.get("/dashboard/").context["nav"]]
    assert "publications" not in nav
    assert staff.get("/dashboard/publications/").status_code == 200


def test_a_router_section_that_does_not_parse_keeps_publications_in_the_nav(staff, router_off):
    """Its page is where the operator reads what is wrong."""
    _document({"enabled": True})  # no coordinator_url, authority, …
    nav = [item["slug"] for item in staff.get("/dashboard/").context["nav"]]
    assert "publications" in nav


def test_router_off_says_so_and_how_to_turn_it_on(staff, router_off):
    resp = staff.get("/dashboard/publications/")
    assert resp.status_code == 200
    sections = resp.context["sections"]
    assert sections["publications"]["data"]["enabled"] is False
    assert sections["router"]["data"] == {"enabled": False}
    page = resp.content.decode()
    assert "ROUTER mode is off" in page
    notice = page[page.index('id="router-off"') :].split("</div>")[0]
    # What the page shows once it is on, and how: the ROUTER mode doc, not the legacy one.
    assert "model names Backend.AI publishes" in notice and "Router worker panel" in notice
    assert "appproxy_router.enabled: true" in notice and "docs/router-mode.md" in notice
    assert "docs/appproxy.md" not in notice
    # The worker panel renders nothing (the empty panel is hidden by CSS).
    assert '<section class="panel" data-live="router"></section>' in page


def test_router_off_without_any_document(staff, db):
    ConfigDocument.objects.filter(pk=1).delete()
    page = staff.get("/dashboard/publications/").content.decode()
    assert "ROUTER mode is off" in page


def test_publications_list_names_aliases_mappings_and_their_backends(staff, populated):
    data = _sections(staff)["publications"]["data"]
    assert data["enabled"] is True and data["authority"] == AUTHORITY
    items = {p["model"]: p for p in data["items"]}
    assert list(items) == ["empty-model", "llama-4-chat", "qwen-coder"]

    llama = items["llama-4-chat"]
    assert llama["aliases"] == ["llama-4"]
    assert llama["mappings"] == [
        {"endpoint_id": EP_A, "ratio": 0.7, "assigned": True},
        {"endpoint_id": EP_B, "ratio": 0.3, "assigned": False},
    ]
    assert (llama["control_mode"], llama["revision"], llama["state"], llama["pending"]) == (
        "manual",
        "r-42",
        "serving",
        False,
    )
    # The composed weights: 100 × 0.7 × 1.0 and 100 × 0.7 × 0.5 (half up).
    assert llama["backends"] == [
        {"name": f"appproxy-{CIRCUIT_A}-r{ROUTE_1}", "url": "http://10.0.0.7:8001", "weight": 70},
        {"name": f"appproxy-{CIRCUIT_A}-r{ROUTE_2}", "url": "http://10.0.0.7:8002", "weight": 35},
    ]
    assert items["qwen-coder"]["state"] == "pending" and items["qwen-coder"]["pending"] is True
    assert items["qwen-coder"]["backends"] == []
    assert items["empty-model"]["state"] == "empty" and items["empty-model"]["control_mode"] == "strategy_managed"

    assert data["pending_publications"] == ["empty-model", "qwen-coder"]
    assert data["pending_circuits"] == [{"circuit_id": CIRCUIT_LONELY, "subdomain": "lonely", "endpoint_id": EP_LONELY}]
    assert data["published"] == ["empty-model", "llama-4", "llama-4-chat", "qwen-coder"]
    assert data["backends"] == 2


def test_past_the_cap_every_publication_not_serving_is_still_listed(staff, populated, monkeypatch):
    from dashboard import mirror

    monkeypatch.setattr(mirror, "PUBLICATIONS_SHOWN", 2)
    resp = staff.get("/dashboard/publications/")
    data = resp.context["sections"]["publications"]["data"]
    assert [p["model"] for p in data["items"]] == ["empty-model", "qwen-coder"]
    assert (data["items_hidden"], data["items_total"]) == (1, 3)
    assert "1 more of 3 publications not shown: all serving" in resp.content.decode()


def test_the_publications_page_shows_it_all(staff, populated):
    page = staff.get("/dashboard/publications/").content.decode()
    for text in (
        "llama-4-chat",
        "llama-4",
        f"{EP_A} · 0.7",
        f"{EP_B} · 0.3",
        "no circuit here",
        # The backend's name kept on one line (an ident, whole in its title).
        f"appproxy-{CIRCUIT_A}-r{ROUTE_1}</span> · http://10.0.0.7:8001 · 70",
        f"appproxy-{CIRCUIT_A}-r{ROUTE_2}</span> · http://10.0.0.7:8002 · 35",
        "r-42",
        "strategy_managed",
        "Pending publications",
        "empty-model, qwen-coder",
        "Pending circuit",
        "lonely",
        "serving",
        "no mappings",
    ):
        assert text in page, text


def test_a_drained_publication_is_told_apart_from_a_pending_one(staff, router_on):
    _circuit(CIRCUIT_A, EP_A, (ROUTE_1, 8001, 1.0))
    _publish("paused", (EP_A, 0.0))
    items = _sections(staff)["publications"]["data"]["items"]
    assert [(p["model"], p["state"], p["backends"]) for p in items] == [("paused", "drained", [])]


def test_publications_of_another_authority_are_not_listed(staff, router_on):
    Publication.objects.create(authority="someone-else", model="theirs")
    data = _sections(staff)["publications"]["data"]
    assert data["items"] == []
    assert f"No publications mirrored for {AUTHORITY} yet." in staff.get("/dashboard/publications/").content.decode()


def test_an_unparsable_router_section_is_reported_not_raised(staff, node_id):
    # Stored as the router's sync would never store it (it validates first):
    # the dashboard must still answer.
    _document({"enabled": True, "authority": AUTHORITY})
    resp = staff.get("/dashboard/publications/")
    assert resp.status_code == 200
    data = resp.context["sections"]["publications"]["data"]
    assert data["enabled"] is False and "coordinator_url" in data["error"]
    page = resp.content.decode()
    assert "ROUTER mode is off" in page and "does not parse" in page


# -- the Router worker panel ----------------------------------------------------
def test_the_router_worker_panel(staff, populated):
    data = _sections(staff)["router"]["data"]
    assert data["enabled"] is True
    assert (data["authority"], data["node_id"], data["registered"]) == (AUTHORITY, NODE_ID, True)
    assert data["coordinator_url"] == "http://coordinator.test:10200"
    w = data["worker"]
    assert w["worker_id"] == WORKER_ID and w["revision"] == "r-42"
    assert (w["last_pull_result"], w["pulls_full"], w["pulls_unchanged"]) == ("304", 3, 17)
    assert w["last_pull_at"].endswith("Z") and w["last_heartbeat_at"].endswith("Z")
    assert 3.0 <= w["heartbeat_age_s"] < 60
    assert (data["publications"], data["coordinator_keys"], data["backends"]) == (3, 1, 2)
    assert data["events_subscriber"] is False  # no events process in this test
    nodes = {n["node_id"]: n for n in data["nodes"]}
    assert set(nodes) == {NODE_ID, OTHER_NODE}
    assert nodes[NODE_ID]["this_node"] is True and nodes[OTHER_NODE]["this_node"] is False
    assert nodes[OTHER_NODE]["status"] == "registered" and nodes[OTHER_NODE]["last_heartbeat_at"].endswith("Z")
    # Router events only, newest first, with their ack latency.
    events = data["events"]
    assert [(e["name"], e["id"]) for e in events] == [
        ("appproxy_router_model_updated_event", "llama-4-chat"),
        ("appproxy_router_key_updated_event", "key-abc"),
    ]
    assert events[0]["ack_ms"] is None and events[0]["ok"] is False
    assert events[1]["ack_ms"] == 55.0 and events[1]["apply_ms"] == 40.0


def test_the_router_worker_panel_renders(staff, populated):
    page = staff.get("/dashboard/publications/").content.decode()
    for text in (
        "Router worker",
        AUTHORITY,
        NODE_ID,
        OTHER_NODE,
        WORKER_ID,
        "304 unchanged",
        "3 / 17",
        "this node",
        "Coordinator keys",
        "appproxy_router_key_updated_event",
        "55.0 ms",
        "not acked",
    ):
        assert text in page, text
    assert "appproxy_circuit_created_event" not in page


def test_a_node_that_has_not_registered_says_so(staff, router_on):
    data = _sections(staff)["router"]["data"]
    assert data["worker"] is None and data["registered"] is False and data["nodes"] == []
    assert "has not registered with the coordinator yet" in staff.get("/dashboard/publications/").content.decode()


def test_a_full_pull_is_shown_as_200(staff, populated):
    WorkerState.objects.filter(node_id=NODE_ID).update(last_pull_result="200")
    assert "200 full" in staff.get("/dashboard/publications/").content.decode()


# -- live.json ---------------------------------------------------------------------
def test_live_json_serves_the_router_sections(staff, populated):
    body = orjson.loads(staff.get("/dashboard/live.json?sections=router,publications").content)
    assert list(body["sections"]) == ["router", "publications"]  # the order asked for
    assert body["sections"]["router"]["data"]["worker"]["revision"] == "r-42"
    assert [p["model"] for p in body["sections"]["publications"]["data"]["items"]] == [
        "empty-model",
        "llama-4-chat",
        "qwen-coder",
    ]
    page = staff.get("/dashboard/publications/").content.decode()
    assert body["sections"]["publications"]["html"] in page
    assert 'data-live="router"' in page and 'data-live="publications"' in page


def test_live_json_with_router_off(staff, router_off):
    body = orjson.loads(staff.get("/dashboard/live.json?sections=router,publications").content)
    assert body["sections"]["router"]["data"] == {"enabled": False}
    assert body["sections"]["publications"]["data"]["enabled"] is False
    assert body["sections"]["router"]["html"] == ""


# -- coordinator keys on the Keys page -----------------------------------------------
def test_the_keys_page_labels_coordinator_keys_read_only(staff, populated):
    resp = staff.get("/dashboard/keys/")
    rows = {k["name"]: k for k in resp.context["sections"]["keys"]["data"]["rows"]}
    assert rows["key-abc"]["source"] == "coordinator" and rows["key-abc"]["read_only"] is True
    assert rows["key-abc"]["hint"] == "sk-…c0de"
    page = resp.content.decode()
    assert "sk-…c0de" in page and "coordinator-owned · read-only" in page


def test_operator_keys_are_not_labelled_read_only(staff, mirror):
    rows = staff.get("/dashboard/keys/").context["sections"]["keys"]["data"]["rows"]
    assert rows and all(k["read_only"] is False for k in rows)


# -- admin -----------------------------------------------------------------------------
def test_publications_are_read_only_in_the_admin(superuser, populated):
    pub = Publication.objects.get(model="llama-4-chat")
    listing = superuser.get("/admin/appproxy/publication/")
    assert listing.status_code == 200
    page = listing.content.decode()
    assert "llama-4-chat" in page and "qwen-coder" in page
    assert superuser.get("/admin/appproxy/publication/add/").status_code == 403
    detail = superuser.get(f"/admin/appproxy/publication/{pub.pk}/change/")
    assert detail.status_code == 200 and 'name="_save"' not in detail.content.decode()
    assert superuser.post(f"/admin/appproxy/publication/{pub.pk}/change/", {"model": "x"}).status_code == 403
    assert superuser.get(f"/admin/appproxy/publication/{pub.pk}/delete/").status_code == 403
    assert Publication.objects.get(pk=pub.pk).model == "llama-4-chat"


def test_the_worker_state_admin_shows_the_router_fields(superuser, populated):
    page = superuser.get("/admin/appproxy/workerstate/").content.decode()
    for text in (NODE_ID, "router", "r-42", "304", "17"):
        assert text in page, text
    row = WorkerState.objects.get(node_id=NODE_ID)
    detail = superuser.get(f"/admin/appproxy/workerstate/{row.pk}/change/").content.decode()
    for label in ("Node id", "Mode", "Revision", "Last pull result", "Pulls full", "Pulls unchanged"):
        assert label in detail, label


# -- no secret anywhere -------------------------------------------------------------------
def test_no_page_or_json_shows_a_token_hash_or_the_api_secret(superuser, populated, monkeypatch):
    key = ApiKey.objects.get(source="coordinator")
    assert key.key_hash == KNOWN_HASH
    pub = Publication.objects.get(model="llama-4-chat")
    worker = WorkerState.objects.get(node_id=NODE_ID)
    urls = [
        *PAGES,
        "/dashboard/live.json",
        "/status",
        "/metrics",
        "/admin/keys/apikey/",
        f"/admin/keys/apikey/{key.pk}/change/",
        "/admin/appproxy/publication/",
        f"/admin/appproxy/publication/{pub.pk}/change/",
        "/admin/appproxy/workerstate/",
        f"/admin/appproxy/workerstate/{worker.pk}/change/",
        "/admin/appproxy/eventrecord/",
        "/admin/router/configdocument/1/change/",
    ]
    secrets = {"token hash": KNOWN_HASH, "api_secret": API_SECRET}
    for document in ("env", "literal"):
        if document == "literal":
            _document(_section(api_secret=LITERAL_SECRET))
            secrets["literal api_secret"] = LITERAL_SECRET
        for url in urls:
            resp = superuser.get(url)
            assert resp.status_code == 200, url
            body = resp.content.decode()
            for what, secret in secrets.items():
                assert secret not in body, f"{what} appears on {url}"
        # The router sections were really rendered (enabled, populated).
        assert "llama-4-chat" in superuser.get("/dashboard/publications/").content.decode()


@pytest.mark.django_db(transaction=True)
def test_status_and_metrics_with_live_facts_show_no_token_hash(superuser, populated, live_runtime):
    """/status and /metrics read the DB in a worker thread (they run in the
    event loop): committed rows here, so their facts are real."""
    from appproxy.router_mode import metrics as router_metrics
    from appproxy.router_mode import status as router_status

    live_runtime()  # /status reports the snapshot a serving process holds
    router_status._cache.update(at=0.0, key=None, value=None)
    router_metrics.record_event("appproxy_router_key_updated_event", True, 0.04, 0.055)
    status = superuser.get("/status")
    assert status.status_code == 200
    section = orjson.loads(status.content)["appproxy_router"]
    assert section["enabled"] is True and section["coordinator_keys"] == 1, section
    metrics = superuser.get("/metrics").content.decode()
    assert 'appproxy_router_events_total{event="key_updated",result="ok"} 1.0' in metrics
    assert 'appproxy_router_revision_info{revision="r-42"} 1.0' in metrics
    for body in (status.content.decode(), metrics):
        assert KNOWN_HASH not in body and API_SECRET not in body


def test_a_mirror_that_cannot_be_read_is_reported_not_raised(staff, populated, monkeypatch):
    from appproxy.router_mode import status as router_status

    def broken(authority):
        raise ValueError("mirrored publication does not parse")

    monkeypatch.setattr(router_status, "mirror_summary", broken)
    resp = staff.get("/dashboard/publications/")
    assert resp.status_code == 200
    data = resp.context["sections"]["publications"]["data"]
    assert data["enabled"] is True and "does not parse" in data["plan_error"]
    assert data["pending_circuits"] == [] and data["pending_publications"] == []
    # The backends are the snapshot's: still shown.
    assert [len(p["backends"]) for p in data["items"]] == [0, 2, 0]
    assert "could not be counted" in resp.content.decode()


def test_the_circuits_page_names_the_backends_a_publication_gave_its_routes(staff, populated):
    """Circuits arrive before the publication that maps their endpoint; once
    it does, their routes are served, and the Circuits page says by which
    backend (not "no backend"). Removing the publication takes them back."""
    from router.models import Backend

    def route_backends() -> dict[str, list[str]]:
        rows = _sections(staff, "/dashboard/circuits/")["circuits"]["data"]
        return {c["circuit_id"]: [r["backend_name"] for r in c["routes"]] for c in rows}

    served = route_backends()[CIRCUIT_A]
    assert len(served) == 2 and all(served), served
    assert set(served) <= set(Backend.objects.values_list("name", flat=True))
    assert route_backends()[CIRCUIT_LONELY] == [""]  # no publication maps its endpoint
    page = staff.get("/dashboard/circuits/").content.decode()
    assert page.count("no backend") == 1, page
    router_services.remove_publication(AUTHORITY, "llama-4-chat")
    assert route_backends()[CIRCUIT_A] == ["", ""]
