"""ROUTER mode end to end (seed §9, issue 9 acceptance): two real nodes (each
its own web, tasks and events processes, SQLite and Redis namespace) under
one authority of the fake coordinator's BEP-1053 side, fake OpenAI replicas
on loopback, and the official ``openai`` SDK as the client.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.answers import answered_by

from .router_support import RouterManager, RouterNode, new_key
from .support import coordinator, eventually


@pytest.fixture(scope="module")
def replicas():
    from fakes import openai_backend

    names = ("rt-a1", "rt-a2", "rt-b1", "rt-c1")
    servers = {name: openai_backend.server_thread(name, ["served"]).start() for name in names}
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="module")
def cluster(replicas):
    fc = coordinator(ack_timeout=10.0)  # generous on a busy machine; a deaf node costs this once
    fc.start()
    authority = f"router-{uuid.uuid4().hex[:8]}"
    nodes = [RouterNode(fc, authority), RouterNode(fc, authority)]
    try:
        for node in nodes:
            node.start()
        yield fc, RouterManager(fc, authority), nodes
    finally:
        for node in nodes:
            node.stop()
        fc.stop()


def sdk(node: RouterNode, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=node.url + "/v1", api_key=key, max_retries=0, timeout=30)


def backend_of(node: RouterNode | openai.OpenAI, model: str, key: str = "") -> str | None:
    """Which replica answered; given a client, reuses it (and its connection)."""
    client = node if isinstance(node, openai.OpenAI) else sdk(node, key)
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "hi"}]
    )
    return answered_by(raw.http_response)


def test_nodes_register_under_one_authority_with_distinct_node_ids(cluster):
    _fc, manager, nodes = cluster
    auth = manager.router_state()["authorities"][manager.authority]
    live = {n["node_id"] for n in auth["nodes"]}
    assert {nodes[0].node_id, nodes[1].node_id} <= live
    assert nodes[0].node_id != nodes[1].node_id
    ids = {node.status()["appproxy_router"]["worker_id"] for node in nodes}
    assert len(ids) == 1  # one worker id shared by every node of the authority
    for node in nodes:
        section = node.status()["appproxy_router"]
        assert section["node_id"] == node.node_id and section["registered"] and section["first_pull_applied"]


def test_weights_compose_and_keys_gate_models(cluster, replicas):
    fc, manager, nodes = cluster
    ep_a = manager.endpoint("ep-a", replicas["rt-a1"], replicas["rt-a2"])
    ep_b = manager.endpoint("ep-b", replicas["rt-b1"])
    # The second replica of A takes traffic_ratio 0.5 (seen by the next pull).
    a_routes = fc.circuit_for_endpoint(ep_a)["route_info"]
    second = next(r for r in a_routes if r["kernel_port"] == int(replicas["rt-a2"].url.rsplit(":", 1)[1]))
    fc.set_traffic_ratio(ep_a, second["route_id"], 0.5)
    manager.publish("llama-4-chat", {ep_a: 0.7, ep_b: 0.3}, aliases=("llama-4",))
    ep_c = manager.endpoint("ep-c", replicas["rt-c1"])
    manager.publish("other-model", {ep_c: 1.0})
    open_plain, open_hash = new_key()
    narrow_plain, narrow_hash = new_key()
    manager.put_key("k-open", open_hash)
    manager.put_key("k-narrow", narrow_hash, allowed_models=["llama-4"])  # the alias only

    for node in nodes:
        eventually(lambda n=node: _weights(n) == [30, 35, 70, 100], 30, "composed weights")

    expected = {"rt-a1": 70 / 135, "rt-a2": 35 / 135, "rt-b1": 30 / 135}
    for node in nodes:
        for model in ("llama-4-chat", "llama-4"):
            # 500 per name, 1,000 per node; smooth weighted round robin keeps
            # every share within ±4 points of the composed weight.
            client = sdk(node, open_plain)
            seen = Counter(backend_of(client, model) for _ in range(500))
            assert set(seen) == set(expected), seen
            for name, share in expected.items():
                assert abs(seen[name] / 500 - share) < 0.04, (model, seen)

        # /v1/models = allowed ∩ published, names and aliases gated independently.
        listed = {m.id for m in sdk(node, open_plain).models.list()}
        assert listed >= {"llama-4-chat", "llama-4", "other-model"}
        assert {m.id for m in sdk(node, narrow_plain).models.list()} == {"llama-4"}
        assert backend_of(node, "llama-4", narrow_plain) in expected
        with pytest.raises(openai.PermissionDeniedError):
            sdk(node, narrow_plain).chat.completions.create(
                model="llama-4-chat", messages=[{"role": "user", "content": "hi"}]
            )
        with pytest.raises(openai.NotFoundError) as missing:
            sdk(node, open_plain).chat.completions.create(
                model="never-published", messages=[{"role": "user", "content": "hi"}]
            )
        assert missing.value.code == "model_not_found"
        with pytest.raises(openai.AuthenticationError):
            sdk(node, "sk-unknown").models.list()


def _weights(node: RouterNode) -> list[int]:
    return sorted((node.status()["appproxy_router"].get("backend_weights") or {}).values())


def test_rate_limit_ip_list_and_expiry(cluster):
    _fc, manager, nodes = cluster
    node = nodes[0]
    rl_plain, rl_hash = new_key()
    ip_plain, ip_hash = new_key()
    old_plain, old_hash = new_key()
    manager.put_key("k-rate", rl_hash, rate_limit=2)
    manager.put_key("k-ip", ip_hash, allowed_client_ips=["10.0.0.0/8"])
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
    manager.put_key("k-old", old_hash, expires_at=past)
    eventually(lambda: node.models(rl_plain).status_code == 200, 15, "key applied")
    statuses = [node.models(rl_plain).status_code for _ in range(3)]
    assert 429 in statuses
    limited = node.models(rl_plain)
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
    assert node.models(ip_plain).status_code == 403
    eventually(lambda: node.models(old_plain).status_code == 401, 15, "expired key refused")
    assert node.models(old_plain).json()["error"]["code"] == "expired_api_key"


def test_revocation_reaches_both_nodes_and_strict_delete(cluster):
    """A strict delete returns once every live node acked; the key is then
    refused on both (the latency is measured by bench/router_latency.py)."""
    _fc, manager, nodes = cluster
    plain, digest = new_key()
    manager.put_key("k-revoke", digest)
    for node in nodes:
        eventually(lambda n=node: n.models(plain).status_code == 200, 15, "key live")
    answer = manager.delete_key("k-revoke", strict=True)
    assert answer["success"] and answer["propagation"] == "acked" and answer.get("unconfirmed_nodes") == []
    for node in nodes:
        eventually(lambda n=node: n.models(plain).status_code == 401, 15, "revoked")


def test_strict_delete_names_a_stopped_node(cluster):
    _fc, manager, nodes = cluster
    plain, digest = new_key()
    manager.put_key("k-strict", digest)
    nodes[1].events.stop()  # alive (heartbeats) but deaf: it cannot ack
    try:
        answer = manager.delete_key("k-strict", strict=True)
        assert answer.get("unconfirmed_nodes") == [nodes[1].node_id]
        assert nodes[0].models(plain).status_code == 401
        # …and the deaf node converges by its periodic pull.
        eventually(lambda: nodes[1].models(plain).status_code == 401, 15, "pull heals")
    finally:
        nodes[1].events.start()


def test_steady_state_pulls_are_304(cluster):
    _fc, manager, nodes = cluster

    def pulls_304() -> int:
        return sum(c["304"] for c in manager.router_state()["pulls"].values())

    counted = pulls_304()

    def unchanged(node: RouterNode) -> int:
        return int(node.status()["appproxy_router"].get("pulls_unchanged") or 0)

    before = [unchanged(n) for n in nodes]
    for i, node in enumerate(nodes):
        eventually(lambda n=node, b=before[i]: unchanged(n) >= b + 2, 30, "304 pulls")
    assert pulls_304() >= counted + 4  # the coordinator counted them too

    # …and each node's /metrics says so, with the events it applied and acked.
    for node in nodes:
        text = httpx.get(node.url + "/metrics", timeout=10).text
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        assert samples[("appproxy_router_pulls_total", (("result", "304"),))] >= 2
        acked = [v for (name, labels), v in samples.items() if name == "appproxy_router_event_ack_seconds_count"]
        assert sum(acked) >= 1
        assert any(name == "appproxy_router_revision_info" for name, _ in samples)


def test_empty_publication_is_listed_and_503_without_fallback(cluster):
    _fc, manager, nodes = cluster
    plain, digest = new_key()
    manager.put_key("k-empty", digest)
    manager.publish("empty-model", {})
    node = nodes[0]
    eventually(lambda: "empty-model" in {m["id"] for m in node.models(plain).json()["data"]}, 15, "listed")
    response = node.chat("empty-model", plain)
    assert response.status_code == 503, response.text
    manager.unpublish("empty-model")
    eventually(lambda: node.chat("empty-model", plain).status_code == 404, 15, "unpublished")


def test_a_restarted_node_gets_a_new_node_id_and_catches_up(cluster):
    _fc, manager, nodes = cluster
    node = nodes[1]
    old = node.node_id
    plain, digest = new_key()
    node.stop()
    # The graceful stop deregistered this node only (DELETE …?node_id=).
    live = {n["node_id"] for n in manager.router_state()["authorities"][manager.authority]["nodes"]}
    assert old not in live and nodes[0].node_id in live
    manager.put_key("k-after-restart", digest)  # published while the node is down
    node.start()
    assert node.node_id != old
    assert node.status()["appproxy_router"]["node_id"] == node.node_id
    eventually(lambda: node.models(plain).status_code == 200, 30, "caught up from the first pull")


def test_tolerated_snapshot_spellings(cluster):
    """kebab-case keys, `publications` / `api-keys` and a numeric revision."""
    fc, manager, nodes = cluster
    fc.set_router_alt_spelling(True)
    try:
        plain, digest = new_key()
        manager.put_key("k-kebab", digest, allowed_models=["llama-4"])
        for node in nodes:
            eventually(lambda n=node: n.models(plain).status_code == 200, 15, "kebab snapshot applied")
            assert {m["id"] for m in node.models(plain).json()["data"]} == {"llama-4"}
    finally:
        fc.set_router_alt_spelling(False)
