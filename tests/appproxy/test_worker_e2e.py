"""The router as a legacy wildcard AppProxy worker, end to end (LEG-1…8).

Real Redis, the fake coordinator (its own channel), fake OpenAI replicas,
and the node's three real processes: web (uvicorn), tasks (Celery worker +
beat) and events (``manage.py runworker appproxy``). One node per module is
shared by the tests that only create and remove their own endpoints.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import uuid

import httpx
import pytest

from appproxy.envelope import CREATED, ROUTE_UPDATED

from .support import (
    AGGREGATION_HOST,
    API_SECRET,
    CHAT,
    DOMAIN,
    JWT_SECRET,
    Manager,
    Node,
    coordinator,
    eventually,
    forge,
    routed_to,
    unsigned,
)

MODEL = "served-model"
FALLBACK_MODEL = "fallback-model"


@pytest.fixture(scope="module")
def replicas():
    from fakes import openai_backend

    servers = {
        name: openai_backend.server_thread(name, [MODEL]).start() for name in ("rep-a", "rep-b", "rep-c", "slow")
    }
    servers["fb"] = openai_backend.server_thread("fb", [FALLBACK_MODEL]).start()
    servers["other"] = openai_backend.server_thread("other", ["other-model"]).start()
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="module")
def payload_node(replicas):
    fc = coordinator(event_format="payload").start()
    fb = replicas["fb"]
    node = Node(
        fc,
        backends=f"  - {{name: fb, url: '{fb.url}', models: [{FALLBACK_MODEL}]}}",
        fallback=f"other-model: [{FALLBACK_MODEL}]",
    )
    try:
        node.start()
        yield node
    finally:
        node.stop()
        fc.stop()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_registers_as_wildcard_inference_worker(payload_node):
    """PUT body per reference §1.3; heartbeats flow; /readyz and /status report it."""
    node = payload_node
    row = node.wait_registered()
    assert row["frontend_mode"] == "wildcard"
    assert row["wildcard_domain"] == DOMAIN
    assert row["wildcard_traffic_port"] == node.port
    assert row["api_port"] == node.port
    assert row["protocol"] == "http"
    assert row["accepted_traffics"] == ["inference"]
    assert row["filtered_apps_only"] is False
    assert row["hostname"] == "127.0.0.1"
    seen = node.fc.state.last_seen.get(node.authority)
    eventually(lambda: (node.fc.state.last_seen.get(node.authority) or 0) > (seen or 0), 15, "a later heartbeat")
    ready = node.readyz()
    assert ready.status_code == 200
    assert ready.json()["checks"]["appproxy_registered"] is True
    assert ready.json()["checks"]["appproxy_first_pull"] is True
    status = node.status()["appproxy"]
    assert status["authority"] == node.authority and status["worker_id"] == row["id"]
    assert status["registered"] and status["first_pull_applied"]
    assert status["events_subscriber"] is True
    assert API_SECRET not in str(status) and JWT_SECRET not in str(status)
    # The events process subscribed before the tasks process registered.
    subscribed = _first_ts(node.events.logs(), "appproxy: subscribed to the event bus")
    registered = _first_ts(node.tasks.logs(), "appproxy: registered")
    assert subscribed < registered


def _first_ts(text: str, msg: str) -> str:
    for line in text.splitlines():
        if line.startswith("{") and json.loads(line).get("msg") == msg:
            return json.loads(line)["ts"]
    raise AssertionError(f"{msg!r} not logged")


def _lifecycle(node: Node, replicas, fmt: str) -> None:
    manager = Manager(node.fc)
    name = _name("ep")
    endpoint_id, created = manager.create(name)
    assert created.status_code == 200, created.text  # the worker acked within the wait
    circuit = manager.circuit(endpoint_id)
    acks = [a for a in node.fc.acks() if circuit["id"] in a.circuit_ids]
    assert acks and acks[0].fmt == fmt and acks[0].authority == node.authority
    # A circuit without routes and without a known model is registered but not routable.
    eventually(lambda: node.chat(node.host(name)).status_code == 503, 15, "circuit registered")

    manager.routes(endpoint_id, replicas["rep-a"])
    response = eventually(lambda: routed_to(node.chat(node.host(name))) == "rep-a" and True, 15, "routable")
    assert response
    answer = node.chat(node.host(name), model="anything-the-client-says")
    assert answer.status_code == 200
    # The circuit's model overrides the body's upstream (the data plane
    # rewrites the answer back to the name the client used).
    upstream = [r for r in replicas["rep-a"].requests if r.method == "POST"][-1]
    assert upstream.json["model"] == MODEL

    assert manager.delete(endpoint_id).status_code == 200
    gone = eventually(lambda: node.chat(node.host(name)).status_code == 404 or None, 15, "removed")
    assert gone
    body = node.chat(node.host(name)).json()
    assert body["error"]["code"] == "endpoint_not_found"
    assert circuit["id"] not in node.mirror()
    names = [n for (n,) in node.db("SELECT name FROM router_backend WHERE source='appproxy'")]
    assert not [n for n in names if circuit["id"] in n]
    events = node.db(
        "SELECT name, fmt, ok, acked_at IS NOT NULL FROM appproxy_eventrecord WHERE circuit_ids LIKE ?",
        f"%{circuit['id']}%",
    )
    assert (CREATED, fmt, 1, 1) in events
    assert (ROUTE_UPDATED, fmt, 1, 0) in events


def test_create_route_remove_payload_format(payload_node, replicas):
    """Released coordinators (26.9): JSON `payload` envelope, acked in kind."""
    _lifecycle(payload_node, replicas, "payload")


def test_create_route_remove_args_format(replicas):
    """Older coordinators: base64-msgpack `args` envelope, acked in kind."""
    fc = coordinator(event_format="args").start()
    node = Node(fc)
    try:
        node.start()
        _lifecycle(node, replicas, "args")
    finally:
        node.stop()
        fc.stop()


def test_backend_names_weights_and_namespaces(payload_node, replicas):
    """One backend per route, `appproxy-<circuit>-r<route>`, weight from the ratio;
    config backends are never touched; removed routes' backends go away."""
    node = payload_node
    manager = Manager(node.fc)
    name = _name("names")
    endpoint_id, created = manager.create(name)
    assert created.status_code == 200
    manager.routes(endpoint_id, replicas["rep-a"], replicas["rep-b"])
    circuit = manager.circuit(endpoint_id)
    route_ids = [r["route_id"] for r in circuit["route_info"]]
    expected = {f"appproxy-{circuit['id']}-r{rid}" for rid in route_ids}

    def ours():
        rows = node.db(
            "SELECT name, url, kind, models, weight FROM router_backend WHERE name LIKE ?", f"%{circuit['id']}%"
        )
        return {r[0]: r for r in rows}

    eventually(lambda: set(ours()) == expected, 15, "backends written")
    for _, url, kind, models, weight in ours().values():
        assert kind == "vllm" and models == f'["{MODEL}"]' and weight == 100
        assert url in {replicas["rep-a"].url, replicas["rep-b"].url}
    node.fc.set_traffic_ratio(endpoint_id, route_ids[0], 2.5, emit=True)
    eventually(lambda: ours()[f"appproxy-{circuit['id']}-r{route_ids[0]}"][4] == 250, 15, "weight updated")
    assert node.db("SELECT source FROM router_backend WHERE name='fb'") == [("config",)]
    manager.routes(endpoint_id, replicas["rep-c"])
    eventually(lambda: len(ours()) == 1 and next(iter(ours().values()))[1] == replicas["rep-c"].url, 15, "replaced")
    manager.delete(endpoint_id)
    eventually(lambda: not ours(), 15, "all removed")


def test_private_circuit_jwt_matrix(payload_node, replicas):
    """Only a valid HS256 token with the circuit's id passes: expired, wrong
    secret, wrong id, alg none and HS512 are all 401 and reach no replica."""
    node = payload_node
    manager = Manager(node.fc)
    name = _name("private")
    endpoint_id, created = manager.create(name, public=False)
    assert created.status_code == 200
    manager.routes(endpoint_id, replicas["rep-b"])
    circuit = manager.circuit(endpoint_id)
    valid = manager.token(endpoint_id)
    host = node.host(name)
    eventually(lambda: routed_to(node.chat(host, token=valid)) == "rep-b", 15, "routable with a token")
    before = len([r for r in replicas["rep-b"].requests if r.method == "POST"])

    future = int(time.time()) + 3600
    claims = {"id": circuit["id"], "exp": future}
    bad = {
        "missing": None,
        "expired": forge({"id": circuit["id"], "exp": int(time.time()) - 60}),
        "wrong secret": forge(claims, key="not-the-" + JWT_SECRET),
        "api secret": forge(claims, key=API_SECRET),
        "wrong id": forge({"id": str(uuid.uuid4()), "exp": future}),
        "alg none": unsigned(claims),
        "HS512": forge(claims, alg="HS512"),
    }
    for label, token in bad.items():
        response = node.chat(host, token=token)
        assert response.status_code == 401, (label, response.text)
        assert response.json()["error"]["code"] == "invalid_token", label
    assert len([r for r in replicas["rep-b"].requests if r.method == "POST"]) == before
    assert routed_to(node.chat(host, token=valid)) == "rep-b"
    manager.delete(endpoint_id)


def test_allowed_client_ips(payload_node, replicas):
    """A circuit's allowed_client_ips that excludes the client is 403; one that
    includes it lets the request through."""
    node = payload_node
    manager = Manager(node.fc)
    name = _name("ips")
    endpoint_id, created = manager.create(name)
    assert created.status_code == 200
    manager.routes(endpoint_id, replicas["rep-a"])
    host = node.host(name)
    eventually(lambda: routed_to(node.chat(host)) == "rep-a", 15, "routable")
    circuit = manager.circuit(endpoint_id)
    route_id = circuit["route_info"][0]["route_id"]

    def restrict(ips: str | None) -> None:
        with node.fc.state.lock:
            node.fc.state.circuits[circuit["id"]]["allowed_client_ips"] = ips
        node.fc.set_traffic_ratio(endpoint_id, route_id, 1.0, emit=True)  # a route_updated carrying it

    restrict("10.0.0.0/8, 192.168.1.1")
    forbidden = eventually(lambda: (r := node.chat(host)).status_code == 403 and r, 15, "403")
    assert forbidden.json()["error"]["code"] == "ip_not_allowed"
    restrict("10.0.0.0/8,127.0.0.0/8")
    eventually(lambda: routed_to(node.chat(host)) == "rep-a", 15, "allowed again")
    manager.delete(endpoint_id)


def test_empty_circuit_falls_back_after_auth(payload_node, replicas):
    """A private circuit whose routes are gone pins its model and falls through
    to that model's fallback chain, but only after its JWT passed."""
    node = payload_node
    manager = Manager(node.fc)
    name = _name("fallback")
    endpoint_id, created = manager.create(name, public=False)
    assert created.status_code == 200
    manager.routes(endpoint_id, replicas["other"])  # the model "other-model" is discovered
    token = manager.token(endpoint_id)
    host = node.host(name)
    eventually(lambda: routed_to(node.chat(host, token=token)) == "other", 15, "routable")
    manager.routes(endpoint_id)  # every replica gone: no routes
    eventually(lambda: routed_to(node.chat(host, token=token)) == "fb", 15, "falls back to the chain")
    fb_before = len([r for r in replicas["fb"].requests if r.method == "POST"])
    for token_value in (None, forge({"id": str(uuid.uuid4()), "exp": int(time.time()) + 60})):
        response = node.chat(host, token=token_value)
        assert response.status_code == 401
    assert len([r for r in replicas["fb"].requests if r.method == "POST"]) == fb_before
    manager.delete(endpoint_id)


def test_unknown_subdomain_apex_and_aggregation_hosts(payload_node, replicas):
    """Unknown subdomain → 404 endpoint_not_found (never fallback); the apex and
    aggregation hosts route by model name across circuits; other hosts too."""
    node = payload_node
    manager = Manager(node.fc)
    name = _name("agg")
    endpoint_id, created = manager.create(name)
    assert created.status_code == 200
    manager.routes(endpoint_id, replicas["rep-c"])
    eventually(lambda: routed_to(node.chat(node.host(name))) == "rep-c", 15, "routable")
    missing = node.chat(node.host("no-such-endpoint"), model=MODEL)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "endpoint_not_found"
    for host in (DOMAIN.lstrip("."), AGGREGATION_HOST, f"{AGGREGATION_HOST}:{node.port}", "127.0.0.1"):
        assert node.chat(host, model=MODEL).status_code == 200, host
        assert node.chat(host, model="no-such-model").json()["error"]["code"] == "model_not_found"
    upper = node.chat(node.host(name).upper())
    assert routed_to(upper) == "rep-c"
    manager.delete(endpoint_id)


def test_pull_repairs_a_dropped_event(payload_node, replicas):
    """A route update whose event is lost is picked up by the periodic pull
    within one reconcile interval (1 s here, plus the tick)."""
    node = payload_node
    manager = Manager(node.fc)
    name = _name("dropped")
    endpoint_id, created = manager.create(name)
    assert created.status_code == 200
    node.fc.suppress_next_event()
    manager.routes(endpoint_id, replicas["rep-a"])
    assert node.fc.events(ROUTE_UPDATED)[-1].suppressed
    started = time.monotonic()
    eventually(lambda: routed_to(node.chat(node.host(name))) == "rep-a", 15, "pull applied")
    assert time.monotonic() - started < 10  # one interval plus a tick, with slack for load
    manager.delete(endpoint_id)


def test_event_to_routable_latency(payload_node, replicas, capsys):
    """Event published → first request routed to the new replica: p50 over 20."""
    node = payload_node
    manager = Manager(node.fc)
    name = _name("latency")
    endpoint_id, created = manager.create(name)
    assert created.status_code == 200
    host = node.host(name)
    manager.routes(endpoint_id, replicas["rep-a"])
    eventually(lambda: routed_to(node.chat(host)) == "rep-a", 15, "routable")
    samples = []
    with httpx.Client(base_url=node.web.url, timeout=10) as http:
        for i in range(20):
            target = "rep-b" if i % 2 == 0 else "rep-a"
            manager.routes(endpoint_id, replicas[target])
            published = node.fc.events(ROUTE_UPDATED)[-1].at
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                r = http.post("/v1/chat/completions", json={"model": "x", **CHAT}, headers={"Host": host})
                if routed_to(r) == target:
                    samples.append(time.monotonic() - published)
                    break
            else:
                raise AssertionError(f"event {i} never became routable")
    ms = sorted(s * 1000 for s in samples)
    p50, p95 = statistics.median(ms), ms[int(len(ms) * 0.95) - 1]
    with capsys.disabled():
        print(
            f"\nevent-to-routable over {len(ms)} route updates: p50 {p50:.0f} ms, p95 {p95:.0f} ms, max {ms[-1]:.0f} ms"
        )
    assert p50 < 2000
    manager.delete(endpoint_id)


def test_acks_are_not_sent_for_other_authorities(payload_node):
    """A created event for another worker is neither applied nor acked."""
    import redis

    from appproxy import envelope

    node = payload_node
    cid = str(uuid.uuid4())
    other = {"id": cid, "app": "x", "protocol": "http", "subdomain": "foreign", "route_info": []}
    r = redis.Redis.from_url("redis://127.0.0.1:6379/4")
    r.publish(node.fc.channel, envelope.encode_event(CREATED, "payload", authority="someone-else", circuits=[other]))
    r.publish(node.fc.channel, b"{not json")
    r.publish(node.fc.channel, envelope.encode_event(CREATED, "args", authority=node.authority, circuits=[]))
    # The malformed message is recorded and dropped; the process keeps going.
    eventually(lambda: node.db("SELECT count(*) FROM appproxy_eventrecord WHERE name='(malformed)'")[0][0] >= 1, 15)
    assert node.chat(node.host("foreign")).status_code == 404
    assert not [a for a in node.fc.acks() if cid in a.circuit_ids]
    assert node.events.alive


def test_secrets_never_printed(payload_node):
    """Neither secret appears in any process log, /status or /readyz."""
    node = payload_node
    text = node.logs() + str(node.status()) + node.readyz().text
    assert API_SECRET not in text
    assert JWT_SECRET not in text


def test_removed_backend_drains_its_stream(payload_node, replicas):
    """A stream in flight on a replica whose route is replaced finishes on the
    old snapshot, while new requests already go to the new replica."""
    node = payload_node
    manager = Manager(node.fc)
    name = _name("drain")
    endpoint_id, created = manager.create(name)
    assert created.status_code == 200
    manager.routes(endpoint_id, replicas["slow"])
    host = node.host(name)
    eventually(lambda: routed_to(node.chat(host)) == "slow", 15, "routable")
    replicas["slow"].behavior.chunk_delay_s = 0.3
    replicas["slow"].behavior.chunks = 10
    first_chunk = threading.Event()
    result: dict = {}

    def stream() -> None:
        body = {"model": "x", "stream": True, **CHAT}
        with httpx.stream(
            "POST", node.web.url + "/v1/chat/completions", json=body, headers={"Host": host}, timeout=60
        ) as r:
            chunks = []
            for chunk in r.iter_bytes():
                chunks.append(chunk)
                first_chunk.set()
            result.update(status=r.status_code, body=b"".join(chunks))

    try:
        thread = threading.Thread(target=stream)
        thread.start()
        assert first_chunk.wait(15)
        manager.routes(endpoint_id, replicas["rep-a"])
        eventually(lambda: routed_to(node.chat(host)) == "rep-a", 15, "switched")
        thread.join(60)
    finally:
        replicas["slow"].behavior.reset()
    assert result["status"] == 200
    assert result["body"].rstrip().endswith(b"data: [DONE]")
    assert b"error" not in result["body"]
    manager.delete(endpoint_id)


def test_circuit_hosts_use_circuit_auth_and_other_hosts_the_key_gate(payload_node, replicas):
    """With api_keys.mode blocking, a private circuit host still takes its
    circuit JWT (never mistaken for an API key) and lists only its model; the
    aggregation host needs an API key, and no key opens the private circuit
    there."""
    node = payload_node
    manager = Manager(node.fc)
    name = _name("keyed")
    endpoint_id, created = manager.create(name, public=False)
    assert created.status_code == 200
    manager.routes(endpoint_id, replicas["rep-a"])
    token = manager.token(endpoint_id)
    host = node.host(name)
    eventually(lambda: routed_to(node.chat(host, token=token)) == "rep-a", 15, "routable")
    node.web.write_config(node.config + "\napi_keys: {mode: blocking}\n")
    try:
        assert routed_to(node.chat(host, token=token)) == "rep-a"
        assert node.chat(host).status_code == 401  # still the circuit's own rule
        listed = httpx.get(node.web.url + "/v1/models", headers={"Host": host, "Authorization": f"Bearer {token}"})
        assert [m["id"] for m in listed.json()["data"]] == [MODEL]
        refused = node.chat(AGGREGATION_HOST, model=FALLBACK_MODEL)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "missing_api_key"
        out = node.web.manage("createapikey", "--name", _name("k"))
        key = out.stdout.strip().splitlines()[-1]
        eventually(lambda: node.chat(AGGREGATION_HOST, model=FALLBACK_MODEL, token=key).status_code == 200, 15, "keyed")
        hidden = node.chat(AGGREGATION_HOST, model=MODEL, token=key)
        assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "model_not_found"
    finally:
        node.web.write_config(node.config)
    manager.delete(endpoint_id)


def test_circuit_host_stays_on_its_own_replicas(payload_node, replicas):
    """Two endpoints serving the same model name never share replicas through
    their hosts; the aggregation host spreads that model over both."""
    node = payload_node
    manager = Manager(node.fc)
    first, second = _name("own-a"), _name("own-b")
    ep_a, created_a = manager.create(first)
    ep_b, created_b = manager.create(second)
    assert created_a.status_code == created_b.status_code == 200
    manager.routes(ep_a, replicas["rep-a"])
    manager.routes(ep_b, replicas["rep-b"])
    eventually(lambda: routed_to(node.chat(node.host(first))) == "rep-a", 15, "first routable")
    eventually(lambda: routed_to(node.chat(node.host(second))) == "rep-b", 15, "second routable")
    assert {routed_to(node.chat(node.host(first))) for _ in range(8)} == {"rep-a"}
    assert {routed_to(node.chat(node.host(second))) for _ in range(8)} == {"rep-b"}
    spread = {routed_to(node.chat(AGGREGATION_HOST, model=MODEL)) for _ in range(12)}
    assert {"rep-a", "rep-b"} <= spread
    manager.delete(ep_a)
    manager.delete(ep_b)
