"""The coordinator REST client against the fake coordinator (real HTTP)."""

from __future__ import annotations

import uuid

import httpx
import pytest

from appproxy.client import CoordinatorClient, CoordinatorError, CoordinatorUnavailable, WorkerNotFound
from appproxy.wire import WorkerRegistration
from fakes.coordinator import FakeCoordinator
from router.core.secret import Secret
from tests.support.routerproc import free_port

API_SECRET = "client-api-" + "q" * 40


@pytest.fixture
def fc():
    coordinator = FakeCoordinator(
        api_secret=API_SECRET, jwt_secret="jwt-" + "w" * 40, channel=f"test-client-{uuid.uuid4().hex}"
    ).start()
    yield coordinator
    coordinator.stop()


def registration(authority: str = "w-client") -> WorkerRegistration:
    return WorkerRegistration.wildcard(
        authority=authority, hostname="router.test", api_port=8000, wildcard_domain="models.test"
    )


def test_register_heartbeat_pull_deregister(fc):
    with CoordinatorClient(fc.url, Secret(API_SECRET)) as client:
        info = client.register(registration())
        row = fc.worker("w-client")
        assert str(info.id) == row["id"] and row["wildcard_domain"] == ".models.test"
        assert client.register(registration()).id == info.id  # same authority, same id
        client.heartbeat(str(info.id))
        assert "w-client" in fc.state.last_seen
        circuits, failed, errors = client.circuits(str(info.id))
        assert circuits == [] and not failed and not errors
        client.deregister(str(info.id))
        assert fc.worker("w-client")["nodes"] == 1


def test_unknown_worker_is_worker_not_found(fc):
    with CoordinatorClient(fc.url, Secret(API_SECRET)) as client, pytest.raises(WorkerNotFound):
        client.heartbeat(str(uuid.uuid4()))


def test_wrong_secret_is_refused_without_printing_it(fc):
    wrong = "wrong-" + API_SECRET
    with CoordinatorClient(fc.url, Secret(wrong)) as client, pytest.raises(CoordinatorError) as err:
        client.register(registration())
    assert err.value.status == 401 and not isinstance(err.value, CoordinatorUnavailable)
    assert wrong not in str(err.value) and API_SECRET not in repr(client)


def test_unreachable_is_unavailable():
    with CoordinatorClient(f"http://127.0.0.1:{free_port()}", Secret(API_SECRET), timeout=2) as client:
        with pytest.raises(CoordinatorUnavailable):
            client.register(registration())


def test_headers_on_every_call():
    """X-BackendAI-Token and a fresh X-BackendAI-RequestID on each request."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.method == "PUT":
            return httpx.Response(200, json={"id": str(uuid.uuid4())})
        return httpx.Response(500, json={"title": "boom"})

    client = CoordinatorClient("http://c.test", Secret(API_SECRET), transport=httpx.MockTransport(handler))
    client.register(registration())
    with pytest.raises(CoordinatorUnavailable):
        client.heartbeat("w")
    assert [r.headers["x-backendai-token"] for r in seen] == [API_SECRET, API_SECRET]
    ids = {r.headers["x-backendai-requestid"] for r in seen}
    assert len(ids) == 2 and all(uuid.UUID(i).version == 4 for i in ids)


def test_unparseable_circuits_are_reported_not_dropped_silently():
    good = {"id": str(uuid.uuid4()), "route_info": []}
    bad_id = str(uuid.uuid4()).upper()
    bad = {"id": bad_id, "route_info": [{"kernel_port": "not-a-port"}]}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"circuits": [good, bad]})

    client = CoordinatorClient("http://c.test", Secret(API_SECRET), transport=httpx.MockTransport(handler))
    circuits, failed, errors = client.circuits("w")
    assert [str(c.id) for c in circuits] == [good["id"]]
    assert failed == {bad_id.lower()} and len(errors) == 1
