"""Private means private on every path (issue 34, defect 6).

A circuit with access rules of its own — `open_to_public: false` (a circuit
JWT) or `allowed_client_ips` — is reachable through its own Host only. From
any other Host (the apex, an aggregation host, an IP, a Host outside the
wildcard domain) its model is unknown exactly like a name nobody serves:
404 `model_not_found` on every door, absent from `/v1/models`, its replicas
never selected even for a name a public circuit also serves.

A real node (web + tasks + events), the fake coordinator and fake replicas
on loopback, as in test_worker_e2e.py.
"""

from __future__ import annotations

import uuid

import httpx
import pytest

from .support import AGGREGATION_HOST, DOMAIN, Manager, Node, coordinator, eventually, routed_to

SECRET_MODEL = "secret-model"
OPEN_MODEL = "open-model"
SHARED_MODEL = "shared-model"
FENCED_MODEL = "fenced-model"
OTHER_HOSTS = (DOMAIN.lstrip("."), AGGREGATION_HOST, "127.0.0.1", "elsewhere.example")
MESSAGE = {"max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def replicas():
    from fakes import openai_backend

    specs = {
        "secret": [SECRET_MODEL],
        "open": [OPEN_MODEL],
        "shared-pub": [SHARED_MODEL],
        "shared-priv": [SHARED_MODEL],
        "fenced": [FENCED_MODEL],
    }
    servers = {name: openai_backend.server_thread(name, models).start() for name, models in specs.items()}
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="module")
def node():
    fc = coordinator(event_format="payload").start()
    node = Node(fc)
    try:
        node.start()
        yield node
    finally:
        node.stop()
        fc.stop()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _posts(server) -> int:
    return len([r for r in server.requests if r.method == "POST"])


def _restrict(node: Node, manager: Manager, endpoint_id: str, ips: str) -> None:
    """Give the circuit an allowed_client_ips, delivered by a route_updated."""
    circuit = manager.circuit(endpoint_id)
    with node.fc.state.lock:
        node.fc.state.circuits[circuit["id"]]["allowed_client_ips"] = ips
    node.fc.set_traffic_ratio(endpoint_id, circuit["route_info"][0]["route_id"], 1.0, emit=True)


def _post(node: Node, path: str, host: str, body: dict, token: str | None = None) -> httpx.Response:
    headers = {"Host": host}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(node.web.url + path, json=body, headers=headers, timeout=30)


def _get(node: Node, path: str, host: str, token: str | None = None) -> httpx.Response:
    headers = {"Host": host}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.get(node.web.url + path, headers=headers, timeout=30)


def _listed(node: Node, host: str, token: str | None = None) -> list[str]:
    response = _get(node, "/v1/models", host, token)
    assert response.status_code == 200, response.text
    return [m["id"] for m in response.json()["data"]]


def _as_unknown(node: Node, host: str, model: str, token: str | None = None) -> None:
    """`model` answers on every door exactly as a name nobody serves."""
    ghost = f"no-such-{uuid.uuid4().hex[:6]}"
    for path, body in (
        ("/v1/chat/completions", {"messages": MESSAGE["messages"]}),
        ("/v1/messages", MESSAGE),
        ("/v1/messages/count_tokens", {"messages": MESSAGE["messages"]}),
    ):
        hidden = _post(node, path, host, {"model": model, **body}, token)
        unknown = _post(node, path, host, {"model": ghost, **body}, token)
        assert hidden.status_code == unknown.status_code == 404, (host, path, hidden.text)
        assert hidden.text.replace(model, "M") == unknown.text.replace(ghost, "M"), (host, path)
    hidden = _get(node, f"/v1/models/{model}", host, token)
    unknown = _get(node, f"/v1/models/{ghost}", host, token)
    assert hidden.status_code == unknown.status_code == 404, (host, hidden.text)
    assert hidden.json()["error"]["code"] == "model_not_found"
    assert model not in _listed(node, host, token)


def test_private_circuit_is_reachable_through_its_own_host_only(node, replicas):
    """A private circuit with an IP list: served through its Host with its JWT
    from an allowed address; through every other Host (with or without its
    JWT) its model is an unknown name on every door and in /v1/models, and
    its replica gets nothing."""
    manager = Manager(node.fc)
    name = _name("secret")
    endpoint_id, created = manager.create(name, public=False)
    assert created.status_code == 200
    manager.routes(endpoint_id, replicas["secret"])
    token = manager.token(endpoint_id)
    host = node.host(name)
    eventually(lambda: routed_to(node.chat(host, token=token)) == "secret", 30, "routable through its host")
    _restrict(node, manager, endpoint_id, "127.0.0.0/8, ::1")
    eventually(lambda: routed_to(node.chat(host, token=token)) == "secret", 30, "and from an allowed address")
    assert node.chat(host).status_code == 401
    assert _listed(node, host, token) == [SECRET_MODEL]
    assert _post(node, "/v1/messages", host, {"model": "anything", **MESSAGE}, token).status_code == 200

    before = _posts(replicas["secret"])
    for other in OTHER_HOSTS:
        _as_unknown(node, other, SECRET_MODEL)
        _as_unknown(node, other, SECRET_MODEL, token)  # its JWT opens its own Host, nothing else
    assert _posts(replicas["secret"]) == before
    manager.delete(endpoint_id)


def test_public_circuit_is_served_everywhere_and_a_shared_name_skips_private_replicas(node, replicas):
    """A public circuit is served through its Host and by name through every
    other Host, and listed there; a name a public and a private circuit both
    serve is routed by name to the public circuit's replicas only, while the
    private circuit's Host keeps its own."""
    manager = Manager(node.fc)
    open_name, pub_name, priv_name = _name("open"), _name("shared-pub"), _name("shared-priv")
    ep_open, _ = manager.create(open_name)
    ep_pub, _ = manager.create(pub_name)
    ep_priv, _ = manager.create(priv_name, public=False)
    manager.routes(ep_open, replicas["open"])
    manager.routes(ep_pub, replicas["shared-pub"])
    manager.routes(ep_priv, replicas["shared-priv"])
    token = manager.token(ep_priv)
    eventually(lambda: routed_to(node.chat(node.host(open_name))) == "open", 15, "open routable")
    eventually(lambda: routed_to(node.chat(node.host(pub_name))) == "shared-pub", 15, "shared-pub routable")
    eventually(lambda: routed_to(node.chat(node.host(priv_name), token=token)) == "shared-priv", 15, "shared-priv")

    for other in OTHER_HOSTS:
        assert routed_to(node.chat(other, model=OPEN_MODEL)) == "open", other
        assert {OPEN_MODEL, SHARED_MODEL} <= set(_listed(node, other)), other
        assert _post(node, "/v1/messages", other, {"model": OPEN_MODEL, **MESSAGE}).status_code == 200
    assert {routed_to(node.chat(AGGREGATION_HOST, model=SHARED_MODEL)) for _ in range(12)} == {"shared-pub"}
    assert {routed_to(node.chat(node.host(priv_name), token=token)) for _ in range(4)} == {"shared-priv"}

    # The private one gone private no more: its replica joins the name's routing.
    manager.delete(ep_priv)
    ep_priv, _ = manager.create(priv_name)
    manager.routes(ep_priv, replicas["shared-priv"])
    eventually(
        lambda: "shared-priv" in {routed_to(node.chat(AGGREGATION_HOST, model=SHARED_MODEL)) for _ in range(12)},
        15,
        "a public circuit's replica is routed by name",
    )
    for endpoint_id in (ep_open, ep_pub, ep_priv):
        manager.delete(endpoint_id)


def test_public_circuit_with_an_ip_list_is_fenced_to_its_host(node, replicas):
    """allowed_client_ips is a circuit's own rule too: other Hosts cannot check
    it, so a public circuit with an IP list is reachable through its Host only
    (403 there for an address outside the list)."""
    manager = Manager(node.fc)
    name = _name("fenced")
    endpoint_id, _ = manager.create(name)
    manager.routes(endpoint_id, replicas["fenced"])
    host = node.host(name)
    eventually(lambda: routed_to(node.chat(host)) == "fenced", 15, "routable")
    eventually(lambda: routed_to(node.chat(AGGREGATION_HOST, model=FENCED_MODEL)) == "fenced", 15, "by name")
    _restrict(node, manager, endpoint_id, "10.0.0.0/8")
    eventually(lambda: node.chat(host).status_code == 403, 15, "403 through its host")
    eventually(lambda: node.chat(AGGREGATION_HOST, model=FENCED_MODEL).status_code == 404, 15, "fenced")
    for other in OTHER_HOSTS:
        _as_unknown(node, other, FENCED_MODEL)
    _restrict(node, manager, endpoint_id, "127.0.0.0/8")
    eventually(lambda: routed_to(node.chat(host)) == "fenced", 15, "allowed through its host")
    assert node.chat(AGGREGATION_HOST, model=FENCED_MODEL).status_code == 404
    manager.delete(endpoint_id)
