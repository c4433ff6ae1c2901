"""Dashboard pages (OPS-1): staff only, every section renders, live.json."""

from __future__ import annotations

import re
import time
import uuid

import orjson
import pytest
from django.contrib.auth.models import User
from django.contrib.staticfiles import finders

from dashboard.routing import websocket_app
from dashboard.sections import PAGES as PAGE_SPECS
from dashboard.sections import SECTIONS
from dashboard.selectors import health_label
from router.models import Backend, ConfigDocument
from router.revision import DOCUMENT, bump_revision, current_revision, touch

from .conftest import PAGES

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("url", [*PAGES, "/dashboard/live.json"])
def test_anonymous_users_are_sent_to_the_login_page(client, url):
    resp = client.get(url)
    assert resp.status_code == 302
    assert resp["Location"].startswith("/admin/login/?next=")


@pytest.mark.parametrize("url", [*PAGES, "/dashboard/live.json"])
def test_signed_in_users_who_are_not_staff_are_sent_to_the_login_page(client, url):
    client.force_login(User.objects.create_user("visitor", "v@example.com", None))
    resp = client.get(url)
    assert resp.status_code == 302
    assert resp["Location"].startswith("/admin/login/")


@pytest.mark.parametrize("url", PAGES)
def test_every_page_renders_for_staff_on_an_empty_mirror(staff, url):
    resp = staff.get(url)
    assert resp.status_code == 200
    assert resp["Cache-Control"].startswith("max-age=0")
    page = resp.content.decode()
    assert "LLM router" in page and 'id="live-status"' in page


@pytest.mark.parametrize("url", PAGES)
def test_every_page_renders_for_staff_on_a_populated_mirror(staff, mirror, observations, url):
    observations({"model": "chat", "provider": "vllm-a", "status": 200})
    resp = staff.get(url)
    assert resp.status_code == 200


def test_pages_use_no_external_assets(staff, mirror):
    for url in PAGES:
        page = staff.get(url).content.decode()
        assert "http://" not in page.replace("http://10.0.0", "").replace("http://testserver", "")
        assert "https://" not in page.replace("https://api.example.com", "")
        # Assets are vendored and served by the router itself (no CDN).
        assets = re.findall(r'<(?:link[^>]*href|script[^>]*src)="([^"]+)"', page)
        assert assets, url
        for asset in assets:
            assert asset.startswith("/static/dashboard/"), asset
            assert finders.find(asset.removeprefix("/static/")), asset


def test_overview_shows_the_node(staff, mirror):
    page = staff.get("/dashboard/").content.decode()
    for text in ("Readiness", "least_<wbr>latency", "blocking", str(current_revision()), "Uptime"):
        assert text in page
    # Not served by a started runtime here (the test client is not ASGI).
    assert "compiled from the DB mirror" in page


def test_backends_page_lists_every_source_with_its_settings(staff, mirror):
    page = staff.get("/dashboard/backends/").content.decode()
    for text in (
        "vllm-a",
        "ollama-b",
        "cloud-c",
        "appproxy-c1-r1",
        "http://10.0.0.1:8000",
        "normalized",
        "passthrough",
    ):
        assert text in page
    for source in ("src-config", "src-admin", "src-appproxy"):
        assert source in page
    assert ">Latency (EWMA)</th>" in page  # the column says what it averages


def test_backends_page_marks_a_drained_backend(staff, mirror):
    """An operator's drain shows on its row, and only there."""
    assert ">drained</span>" not in staff.get("/dashboard/backends/").content.decode()
    Backend.objects.filter(name="ollama-b").update(drained=True)
    page = staff.get("/dashboard/backends/").content.decode()
    assert page.count(">drained</span>") == 1
    row = page[page.index("ollama-b") :]
    assert row.index(">drained</span>") < row.index("</tr>")


def test_models_page_maps_names_to_backends_and_shows_fallback_chains(staff, mirror):
    resp = staff.get("/dashboard/models/")
    models = {m["name"]: m for m in resp.context["sections"]["models"]["data"]["models"]}
    assert [b["name"] for b in models["chat"]["backends"]] == ["cloud-c", "vllm-a"]
    assert models["llama"]["total"] == 1
    assert models["chat"]["fallback"] == ["chat-small", "ghost"]
    chains = resp.context["sections"]["models"]["data"]["fallback_chains"]
    assert chains == [
        {
            "model": "chat",
            "known": True,
            "chain": [{"name": "chat-small", "known": True}, {"name": "ghost", "known": False}],
        }
    ]
    assert "chat-small → ghost" in resp.content.decode()


def test_keys_page_shows_masked_hints_and_state(staff, mirror):
    page = staff.get("/dashboard/keys/").content.decode()
    assert mirror["key"].hint in page and mirror["revoked"].hint in page
    assert "alice" in page and "60/min" in page and "revoked" in page and "active" in page


def test_requests_page_shows_observations_newest_first(staff, observations):
    observations(
        {
            "model": "chat",
            "routed_model": "chat-small",
            "provider": "ollama-b",
            "kind": "ollama",
            "path": "normalized",
            "endpoint": "chat/completions",
            "status": 200,
            "queue": "queued",
            "queue_ms": 12.34,
            "hops": ["chat-small"],
            "attempts": 2,
            "failures": ["vllm-a:503"],
            "failure_details": {"vllm-a": "upstream said: <b>overloaded</b>"},
            "usage": {"prompt_tokens": 11, "completion_tokens": 7},
            "latency_ms": 1534.0,
            "ttft_ms": 88.25,
            "request_id": "req-older",
        },
        {"model": "nope", "status": 404, "error": "model_not_found", "request_id": "req-newer"},
    )
    resp = staff.get("/dashboard/requests/")
    items = resp.context["sections"]["recent"]["data"]["items"]
    assert [i["request_id"] for i in items] == ["req-newer", "req-older"]
    older = items[1]
    assert older["usage"] == {"input": 11, "output": 7}
    assert older["hops"] == ["chat-small"] and older["attempts"] == 2 and older["queue"] == "queued"
    page = resp.content.decode()
    for text in ("ollama-b", "normalized", "queued", "12.3 ms", "1.53 s", "88.2 ms", "11 / 7", "model_not_found"):
        assert text in page
    # What the failed backend said, escaped (it is the backend's text, not ours).
    assert older["failure_details"] == [{"backend": "vllm-a", "detail": "upstream said: <b>overloaded</b>"}]
    assert "vllm-a: upstream said: &lt;b&gt;overloaded&lt;/b&gt;" in page


def test_requests_page_shows_the_routing_path_of_a_disaggregated_request(staff, observations):
    observations(
        {
            "model": "llama", "provider": "d1", "path": "passthrough", "endpoint": "chat/completions",
            "status": 200, "routing_path": "prefill_then_decode", "prefill_backend": "p1",
            "prefill_ms": 41.26, "decode_ttft_ms": 7.5, "request_id": "req-pd",
        },
    )
    resp = staff.get("/dashboard/requests/")
    (item,) = resp.context["sections"]["recent"]["data"]["items"]
    assert item["routing_path"] == "prefill_then_decode" and item["prefill_backend"] == "p1"
    page = resp.content.decode()
    assert "prefill_then_decode · prefill 41.3 ms · decode first byte 7.5 ms" in page
    assert "prefill on p1" in page


def test_requests_page_skips_malformed_observations(staff, observations, redis_prefix):
    from router.observe import recent_key
    from router.redis import sync_client

    observations({"model": "ok-model", "status": 200})
    sync_client().lpush(recent_key(), b"{not json", b"[1, 2]")
    items = staff.get("/dashboard/requests/").context["sections"]["recent"]["data"]["items"]
    assert [i["model"] for i in items] == ["ok-model"]


def test_requests_page_reports_redis_down_instead_of_failing(staff, monkeypatch):
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from router import redis as router_redis

    # Nothing listens on port 1: a real refused connection, no retries.
    broken = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    monkeypatch.setattr(router_redis, "sync_client", lambda: broken)
    resp = staff.get("/dashboard/requests/")
    assert resp.status_code == 200
    assert "Redis unavailable" in resp.content.decode()


def test_appproxy_pages_are_in_the_nav_only_while_their_mode_is_on(staff):
    from dashboard import mirror

    assert mirror.available() == {"WorkerState": True, "Circuit": True, "EventRecord": True, "Publication": True}

    def nav() -> set[str]:
        return {item["slug"] for item in staff.get("/dashboard/").context["nav"]}

    _document({"api_keys": {"mode": "open"}})
    assert not nav() & {"circuits", "events", "publications"}
    assert {"overview", "charts", "backends", "cluster", "models", "keys", "requests"} <= nav()
    _document({"appproxy": LEGACY_ON})
    assert {"circuits", "events"} <= nav() and "publications" not in nav()


# -- live.json -----------------------------------------------------------------
def test_live_json_has_every_section_with_data_and_html(staff, mirror, observations):
    observations({"model": "chat", "status": 200, "provider": "vllm-a"})
    resp = staff.get("/dashboard/live.json")
    assert resp.status_code == 200
    assert resp["Content-Type"] == "application/json"
    assert "no-store" in resp["Cache-Control"]
    body = orjson.loads(resp.content)
    assert set(body) == {"generated_at", "revision", "sections"}
    assert body["revision"] == current_revision()
    assert body["generated_at"].endswith("Z")
    assert set(body["sections"]) == set(SECTIONS)
    for name, section in body["sections"].items():
        assert set(section) == {"title", "data", "html"}, name
        assert isinstance(section["html"], str)

    node = body["sections"]["node"]["data"]
    assert {
        "ready",
        "checks",
        "snapshot_source",
        "revision",
        "db_revision",
        "strategy",
        "api_keys_mode",
        "uptime_s",
        "started_at",
        "backends_total",
        "backends_healthy",
        "in_flight",
        "waiting",
        "models_total",
    } <= set(node)
    assert node["strategy"] == "least_latency" and node["api_keys_mode"] == "blocking"
    assert node["backends_total"] == 4

    backend = body["sections"]["backends"]["data"]["rows"][0]
    assert set(backend) == {
        "name",
        "source",
        "kind",
        "path",
        "url",
        "models",
        "served_model",
        "weight",
        "capacity",
        "priority",
        "drained",
        "healthy",
        "health",
        "probe_healthy",
        "breaker",
        "breaker_retry_s",
        "in_flight",
        "reported_load",
        "kv_usage",
        "ewma_ms",
        "requests",
        "prompt_cache_hit_ratio",
        "failures",
    }
    recent = body["sections"]["recent"]["data"]
    assert recent["available"] is True and recent["items"][0]["model"] == "chat"
    keys = body["sections"]["keys"]["data"]["rows"]
    assert {k["name"] for k in keys} == {"team-a", "retired"}


def test_live_json_returns_only_the_sections_asked_for(staff, mirror):
    body = orjson.loads(staff.get("/dashboard/live.json?sections=backends,nonsense,recent").content)
    assert list(body["sections"]) == ["backends", "recent"]
    assert body["revision"] == current_revision()


def test_live_json_html_matches_the_page(staff, mirror):
    page = staff.get("/dashboard/backends/").content.decode()
    live = orjson.loads(staff.get("/dashboard/live.json?sections=backends").content)
    assert live["sections"]["backends"]["html"] in page


def test_every_page_polls_only_its_own_sections(staff):
    for spec in PAGE_SPECS:
        url = "/dashboard/" if spec.slug == "overview" else f"/dashboard/{spec.slug}/"
        page = staff.get(url).content.decode()
        for name in spec.sections:
            if f'data-live="{name}"' not in page:
                assert spec.needs is not None  # an appproxy page without its models
        assert "/dashboard/live.json" in page


# -- the live runtime of a serving process --------------------------------------
def test_a_serving_process_shows_its_live_backend_states(staff, mirror, live_runtime):
    rt = live_runtime()
    vllm = rt.states.get("vllm-a")
    vllm.on_start()
    vllm.on_start()
    vllm.on_success(120.0, time.monotonic())
    cloud = rt.states.get("cloud-c")
    for _ in range(cloud.policy.failure_threshold):
        cloud.on_start()
        cloud.on_failure(time.monotonic())
    rt.states.get("ollama-b").probe_healthy = False

    body = orjson.loads(staff.get("/dashboard/live.json?sections=node,backends,models").content)
    node = body["sections"]["node"]["data"]
    assert node["snapshot_source"] == "live" and node["ready"] is True
    assert node["revision"] == node["db_revision"] == current_revision()
    rows = {b["name"]: b for b in body["sections"]["backends"]["data"]["rows"]}
    assert rows["vllm-a"]["in_flight"] == 1 and rows["vllm-a"]["ewma_ms"] == 120.0
    assert rows["vllm-a"]["requests"] == 2 and rows["vllm-a"]["healthy"] is True
    assert rows["cloud-c"]["breaker"] == "open" and rows["cloud-c"]["healthy"] is False
    assert rows["cloud-c"]["health"] == "breaker_open" and rows["cloud-c"]["breaker_retry_s"] > 0
    assert rows["vllm-a"]["health"] == "healthy" and rows["ollama-b"]["health"] == "probe_failing"
    assert rows["cloud-c"]["failures"] == cloud.policy.failure_threshold
    assert rows["ollama-b"]["probe_healthy"] is False
    models = {m["name"]: m for m in body["sections"]["models"]["data"]["models"]}
    assert (models["chat"]["usable"], models["chat"]["total"]) == (1, 2)
    assert node["backends_healthy"] == 2 and node["in_flight"] == 1
    html = body["sections"]["backends"]["html"]
    assert "probe failing" in html and "120.0 ms" in html
    # The open breaker says when its next trial is, in the Breaker column too.
    trial = re.search(r'data-next-trial="([0-9.]+)">next trial in ', html)
    assert trial and 0 < float(trial.group(1)) <= cloud.policy.max_cooldown_s


def test_past_the_cap_the_backends_section_keeps_every_row_that_needs_attention(
    staff, mirror, live_runtime, monkeypatch
):
    """At cluster size the table is capped (selectors.BACKENDS_SHOWN); the
    rows left out are only healthy, idle ones that never failed."""
    from dashboard import selectors as dash_selectors

    rt = live_runtime()
    rt.states.get("vllm-a").on_start()
    rt.states.get("ollama-b").probe_healthy = False
    every = [
        b["name"]
        for b in orjson.loads(staff.get("/dashboard/live.json?sections=backends").content)["sections"]["backends"][
            "data"
        ]["rows"]
    ]
    assert len(every) == 4 and {"vllm-a", "ollama-b"} <= set(every)

    monkeypatch.setattr(dash_selectors, "BACKENDS_SHOWN", 2)
    data = orjson.loads(staff.get("/dashboard/live.json?sections=backends").content)["sections"]["backends"]
    assert [b["name"] for b in data["data"]["rows"]] == [n for n in every if n in ("vllm-a", "ollama-b")]
    assert (data["data"]["hidden"], data["data"]["total"]) == (2, 4)
    assert "2 more of 4 backends not shown" in data["html"]

    # The Models section the same way: a name with a backend down first.
    models = orjson.loads(staff.get("/dashboard/live.json?sections=models").content)["sections"]["models"]["data"]
    assert models["models_hidden"] == 0 and len(models["models"]) == models["models_total"] > 1
    degraded = [m["name"] for m in models["models"] if m["usable"] < m["total"]]
    assert degraded and degraded[0] != models["models"][0]["name"]
    monkeypatch.setattr(dash_selectors, "MODELS_SHOWN", 1)
    capped = orjson.loads(staff.get("/dashboard/live.json?sections=models").content)["sections"]["models"]
    assert [m["name"] for m in capped["data"]["models"]] == degraded[:1]
    assert capped["data"]["models_hidden"] == models["models_total"] - 1
    assert f"{models['models_total'] - 1} more of {models['models_total']} names not shown" in capped["html"]

    monkeypatch.setattr(dash_selectors, "BACKENDS_SHOWN", 3)  # room for one idle row, in table order
    rows = orjson.loads(staff.get("/dashboard/live.json?sections=backends").content)["sections"]["backends"]["data"]
    idle = [n for n in every if n not in ("vllm-a", "ollama-b")]
    assert [b["name"] for b in rows["rows"]] == [n for n in every if n in ("vllm-a", "ollama-b", idle[0])]


def test_the_dashboard_never_creates_runtime_states(staff, mirror, live_runtime):
    rt = live_runtime()
    staff.get("/dashboard/backends/")
    assert len(rt.states) == 0


def test_a_stale_process_shows_the_db_revision_it_has_not_loaded(staff, mirror, live_runtime):
    from router.revision import bump_revision

    live_runtime()
    bump_revision("another process changed something")
    node = staff.get("/dashboard/").context["sections"]["node"]["data"]
    assert node["db_revision"] == node["revision"] + 1


# -- websocket ----------------------------------------------------------------
async def test_websocket_handshakes_are_refused_politely():
    sent = []
    messages = iter([{"type": "websocket.connect"}])

    async def receive():
        return next(messages)

    async def send(message):
        sent.append(message)

    await websocket_app({"type": "websocket", "path": "/dashboard/ws"}, receive, send)
    assert sent == [{"type": "websocket.close", "code": 1000}]


def test_a_mirror_that_does_not_compile_is_reported_not_raised(staff, mirror, monkeypatch):
    monkeypatch.delenv("DASH_TEST_UPSTREAM")
    resp = staff.get("/dashboard/")
    assert resp.status_code == 200
    node = resp.context["sections"]["node"]["data"]
    assert node["snapshot_source"] == "unavailable"
    assert "DASH_TEST_UPSTREAM is not set" in node["snapshot_error"]
    assert "No routing snapshot could be compiled" in resp.content.decode()
    assert staff.get("/dashboard/backends/").status_code == 200


def test_health_labels_follow_the_probe_and_the_breaker():
    from router.core.health import BackendState, HealthPolicy

    policy = HealthPolicy(failure_threshold=1, cooldown_s=10.0)
    state = BackendState(policy=policy)
    assert health_label(state, 100.0) == ("healthy", None)
    state.on_start()
    state.on_failure(100.0)
    assert health_label(state, 104.0) == ("breaker_open", 6.0)
    # Cooldown over: usable again, but only as the half-open trial.
    assert health_label(state, 110.0) == ("trial", None)
    state.on_start()
    assert state.breaker == "half_open"
    assert health_label(state, 111.0) == ("breaker_open", None)
    state.on_success(5.0, 111.5)
    assert health_label(state, 112.0) == ("healthy", None)
    state.probe_healthy = False
    assert health_label(state, 112.0) == ("probe_failing", None)


# -- what a new operator tripped over -----------------------------------------
def test_the_favicon_is_served(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"] == "/static/dashboard/favicon.svg"
    assert finders.find("dashboard/favicon.svg")


def _document(document: dict) -> None:
    ConfigDocument.objects.update_or_create(pk=1, defaults={"digest": uuid.uuid4().hex, "document": document})
    touch(DOCUMENT)
    bump_revision("test: document")


LEGACY_ON = {
    "enabled": True,
    "coordinator_url": "http://127.0.0.1:9",
    "api_secret": "s",
    "jwt_secret": "j",
    "authority": "worker-1",
    "hostname": "127.0.0.1",
    "wildcard_domain": "models.example.com",
}


@pytest.mark.parametrize(
    ("url", "shows"),
    [("/dashboard/circuits/", "lists the circuits"), ("/dashboard/events/", "events as this node receives them")],
)
def test_circuits_and_events_say_what_they_show_once_appproxy_is_on_and_how_to_turn_it_on(staff, url, shows):
    _document({"api_keys": {"mode": "open"}})
    page = staff.get(url).content.decode()
    notice = page[page.index('id="appproxy-off"') :].split("</div>")[0]
    assert shows in notice
    assert "appproxy.enabled: true" in notice and "docs/appproxy.md" in notice
    assert "appproxy_router.enabled: true" in notice and "docs/router-mode.md" in notice


def test_the_appproxy_off_notice_is_gone_once_a_mode_is_enabled(staff):
    _document({"appproxy": LEGACY_ON})
    page = staff.get("/dashboard/circuits/").content.decode()
    assert 'id="appproxy-off"' not in page


def test_identifiers_wrap_at_their_separators_only_and_stay_escaped():
    from dashboard.templatetags.dash import breakable

    assert breakable("weighted_round_robin") == "weighted_<wbr>round_<wbr>robin"
    assert breakable("router:ab12:") == "router:<wbr>ab12:<wbr>"
    assert breakable("<b>x_y") == "&lt;b&gt;x_<wbr>y"


def test_names_stay_whole_in_their_title_and_lists_break_between_names_only():
    from dashboard.templatetags.dash import ident, idents

    assert ident("team-a") == '<span class="ident" title="team-a">team-a</span>'
    assert ident('<b>"x"') == '<span class="ident" title="&lt;b&gt;&quot;x&quot;">&lt;b&gt;&quot;x&quot;</span>'
    listed = idents(["chat-a", "chat-b"])
    assert listed == f'<span class="nowrap">{ident("chat-a")},</span> {ident("chat-b")}'  # no line starts with ","
    assert idents([]) == "—"
