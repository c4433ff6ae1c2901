"""ROUTER replica groups end to end (issue 41, item 9): a real node (web,
tasks, events) under the fake coordinator, one endpoint in the refined
BEP-1053 shape (replica groups, one of them empty) and one in the seed's
shape, fake OpenAI replicas on loopback and the ``openai`` SDK as the
client. The same fleet is served under ``weighting: flat`` and then, after
a YAML edit, ``weighting: hierarchical``; 1,000 requests each land within
±4 points of the rule's shares.
"""

from __future__ import annotations

import uuid
from collections import Counter

import openai
import pytest

from tests.support.answers import answered_by

from .router_support import RouterManager, RouterNode, new_key, router_yaml
from .support import coordinator, eventually, kernel

REQUESTS = 1000


@pytest.fixture(scope="module")
def replicas():
    from fakes import openai_backend

    names = ("grp-a1", "grp-a2", "grp-b1", "grp-b2", "grp-b3", "grp-b4")
    servers = {name: openai_backend.server_thread(name, ["served"]).start() for name in names}
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="module")
def node():
    fc = coordinator(ack_timeout=10.0)
    fc.start()
    authority = f"router-{uuid.uuid4().hex[:8]}"
    n = RouterNode(fc, authority)
    try:
        n.start()
        yield fc, RouterManager(fc, authority), n
    finally:
        n.stop()
        fc.stop()


def _route(server, group: str | None = None) -> tuple[str, dict]:
    host, port = kernel(server)
    route_id = str(uuid.uuid4())
    body = {"session_id": str(uuid.uuid4()), "route_id": route_id, "kernel_host": host, "kernel_port": port}
    if group is not None:
        body["replica_group_id"] = group
    return route_id, body


def _weights(n: RouterNode, route_of: dict[str, str]) -> dict[str, int]:
    """The replica name → its backend's weight, as /status shows them."""
    by_route = {
        name.rsplit("-r", 1)[1]: w for name, w in (n.status()["appproxy_router"].get("backend_weights") or {}).items()
    }
    return {replica: by_route[rid] for replica, rid in route_of.items() if rid in by_route}


def _shares(client: openai.OpenAI) -> Counter:
    seen: Counter = Counter()
    for _ in range(REQUESTS):
        raw = client.chat.completions.with_raw_response.create(
            model="grouped", messages=[{"role": "user", "content": "hi"}]
        )
        seen[answered_by(raw.http_response)] += 1
    return seen


def test_weight_shares_under_both_rules(node, replicas):
    fc, manager, n = node
    ep_a, created = manager.create("ep-grouped")
    assert created.status_code == 200, created.text
    ep_b, created = manager.create("ep-plain")
    assert created.status_code == 200, created.text
    route_of: dict[str, str] = {}
    # Endpoint A in the refined shape: blue (3) holds a1, green (1) holds a2,
    # canary (4) holds nothing and forfeits its share.
    a_routes = []
    for name, group in (("grp-a1", "blue"), ("grp-a2", "green")):
        route_of[name], body = _route(replicas[name], group)
        a_routes.append(body)
    groups = [
        {"id": "blue", "traffic_weight": 3, "lifecycle": "active"},
        {"id": "green", "traffic_weight": 1, "lifecycle": "active"},
        {"id": "canary", "traffic_weight": 4, "lifecycle": "provisioning"},
    ]
    # Endpoint B in the seed's shape: four replicas, no groups.
    b_routes = []
    for name in ("grp-b1", "grp-b2", "grp-b3", "grp-b4"):
        route_of[name], body = _route(replicas[name])
        b_routes.append(body)
    response = manager.http.post(
        "/v2/endpoints/bulk/routes",
        json={
            "endpoints": [
                {"deployment_id": ep_a, "routes": a_routes, "replica_groups": groups},
                {"deployment_id": ep_b, "routes": b_routes},
            ]
        },
    )
    assert response.status_code == 200, response.text
    circuit = fc.circuit_for_endpoint(ep_a)
    assert [g["id"] for g in circuit["replica_groups"]] == ["blue", "green", "canary"]
    assert "replica_groups" not in fc.circuit_for_endpoint(ep_b)
    manager.publish("grouped", {ep_a: 0.5, ep_b: 0.5})
    plain, token_hash = new_key()
    manager.put_key("k-groups", token_hash)
    client = openai.OpenAI(base_url=n.url + "/v1", api_key=plain, max_retries=0, timeout=30)

    # flat (the default): 100 × 0.5 × 1.0 for every replica, groups ignored.
    flat = dict.fromkeys(route_of, 50)
    eventually(lambda: _weights(n, route_of) == flat, 60, "flat weights")
    assert n.status()["appproxy_router"]["weighting"] == "flat"
    seen = _shares(client)
    for name in route_of:
        assert abs(seen[name] / REQUESTS - 1 / 6) < 0.04, seen

    # hierarchical: A 50 % → blue 3/4, green 1/4 (canary forfeits); B 50 % / 4.
    n.web.config_path.write_text(
        router_yaml(
            coordinator_url=fc.url,
            channel=fc.channel,
            authority=manager.authority,
            port=n.port,
            weighting="hierarchical",
        )
    )
    expected = {"grp-a1": 0.375, "grp-a2": 0.125, **dict.fromkeys(("grp-b1", "grp-b2", "grp-b3", "grp-b4"), 0.125)}
    hierarchical = {name: round(1000 * share) for name, share in expected.items()}
    eventually(lambda: _weights(n, route_of) == hierarchical, 90, "hierarchical weights")
    assert n.status()["appproxy_router"]["weighting"] == "hierarchical"
    seen = _shares(client)
    for name, share in expected.items():
        assert abs(seen[name] / REQUESTS - share) < 0.04, seen
