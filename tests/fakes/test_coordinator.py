"""The fake coordinator against real Redis, end to end over loopback HTTP.

Every test uses its own Pub/Sub channel (Pub/Sub ignores the DB number), so
parallel runs never see each other's events. No fixed sleeps: waits poll a
condition with a generous deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

import httpx
import jwt
import pytest
import redis.asyncio as aioredis

from appproxy import envelope
from appproxy.envelope import ACK, CREATED, REMOVED, ROUTE_UPDATED, EnvelopeError
from appproxy.legacy.jwtauth import verify_circuit_token
from appproxy.wire import Circuit, WorkerRegistration
from fakes.coordinator import FakeCoordinator, check_lost_workers, main
from router.core.errors import InvalidToken

REDIS_URL = "redis://127.0.0.1:6379/4"
API_SECRET = "api-secret-" + "a" * 40
JWT_SECRET = "jwt-secret-" + "b" * 40
AUTHORITY = "worker01"
ROOT = Path(__file__).resolve().parents[2]

CIRCUIT_KEYS = [
    "id", "app", "protocol", "worker", "app_mode", "frontend_mode", "envs",
    "arguments", "open_to_public", "allowed_client_ips", "port", "subdomain",
    "user_id", "endpoint_id", "runtime_variant", "route_info", "session_ids",
    "created_at", "updated_at",
]  # fmt: skip


# -- fixtures and helpers ---------------------------------------------------------


@pytest.fixture
def channel() -> str:
    return f"test-appproxy-{uuid.uuid4().hex}"


@pytest.fixture
def make_coordinator(channel: str) -> Iterator[Callable[..., FakeCoordinator]]:
    started: list[FakeCoordinator] = []

    def factory(**kw: Any) -> FakeCoordinator:
        kw.setdefault("api_secret", API_SECRET)
        kw.setdefault("jwt_secret", JWT_SECRET)
        kw.setdefault("ack_timeout", 10.0)
        fc = FakeCoordinator(redis_url=REDIS_URL, channel=channel, **kw)
        started.append(fc)
        return fc.start()

    yield factory
    for fc in started:
        fc.stop()


async def eventually(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.02)


class Responder:
    """A stand-in worker on the bus: records events and acks ``created``.

    mode: "echo" (complete circuits, same format), "ids" (only ids),
    "other-format" (complete circuits, the other envelope), "silent".
    """

    def __init__(self, channel: str, authority: str = AUTHORITY, mode: str = "echo"):
        self.channel = channel
        self.authority = authority
        self.mode = mode
        self.received: list[envelope.Event] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self.client = aioredis.from_url(REDIS_URL)
        self.pubsub = self.client.pubsub()
        await self.pubsub.subscribe(self.channel)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = await self.pubsub.get_message(timeout=1.0)
            if msg and msg["type"] == "subscribe":
                break
        else:
            raise AssertionError("subscription not confirmed")
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        while True:
            msg = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if not msg:
                continue
            try:
                event = envelope.decode(msg["data"])
            except EnvelopeError:
                continue
            if event.name == ACK:
                continue
            self.received.append(event)
            if event.name != CREATED or event.authority != self.authority:
                continue
            if self.mode == "silent":
                continue
            circuits = event.circuits
            fmt = event.fmt
            if self.mode == "ids":
                circuits = [{"id": c["id"]} for c in circuits]
            elif self.mode == "other-format":
                fmt = "args" if fmt == "payload" else "payload"
            await self.client.publish(self.channel, envelope.encode_ack(self.authority, circuits, fmt))

    def named(self, name: str) -> list[envelope.Event]:
        return [e for e in self.received if e.name == name]

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.pubsub.aclose()
        await self.client.aclose()


def client(fc: FakeCoordinator, **kw: Any) -> httpx.AsyncClient:
    kw.setdefault("headers", fc.headers)
    return httpx.AsyncClient(base_url=fc.url, timeout=30.0, **kw)


def registration(**over: Any) -> dict[str, Any]:
    body = WorkerRegistration.wildcard(
        authority=AUTHORITY,
        hostname="router.test",
        api_port=8080,
        wildcard_domain=".models.test",
        wildcard_traffic_port=8000,
    ).to_body()
    body.update(over)
    return body


def create_item(endpoint_id: str, service_name: str = "llama", **over: Any) -> dict:
    item = {
        "deployment_id": endpoint_id,
        "service_name": service_name,
        "tags": {
            "session": {
                "user_uuid": str(uuid.uuid4()),
                "group_id": str(uuid.uuid4()),
                "domain_name": "default",
            },
            "endpoint": {"id": endpoint_id, "runtime_variant": "vllm"},
        },
        "open_to_public": False,
    }
    item.update(over)
    return item


def route_entry(**over: Any) -> dict:
    entry = {
        "session_id": str(uuid.uuid4()),
        "route_id": str(uuid.uuid4()),
        "kernel_host": "10.0.0.5",
        "kernel_port": 8000,
    }
    entry.update(over)
    return entry


async def register(http: httpx.AsyncClient) -> str:
    resp = await http.put("/api/worker", json=registration())
    assert resp.status_code == 200, resp.text
    return resp.json()["id"]


async def create(http: httpx.AsyncClient, *items: dict) -> httpx.Response:
    return await http.post("/v2/endpoints/bulk", json={"endpoints": list(items)})


# -- auth (§1.2) --------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"X-BackendAI-Token": API_SECRET},
        {"X-BackendAI-Token": f"Bearer {API_SECRET}"},
        {"X-BackendAI-Token": f"BackendAI {API_SECRET}"},
        {"Authorization": "Bearer " + jwt.encode({"sub": "m"}, API_SECRET)},
    ],
    ids=["plain", "bearer", "backendai", "jwt"],
)
async def test_accepted_credentials(make_coordinator, headers: dict) -> None:
    fc = make_coordinator(emit_events=False)
    async with client(fc, headers=headers) as http:
        assert (await http.get("/api/worker")).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-BackendAI-Token": "wrong"},
        {"X-BackendAI-Token": f"Token {API_SECRET}"},
        {"X-BackendAI-Token": "wrong", "Authorization": f"Bearer {API_SECRET}"},
        {"Authorization": "Bearer " + jwt.encode({"sub": "m"}, JWT_SECRET)},
        {"Authorization": f"Basic {API_SECRET}"},
    ],
    ids=["none", "wrong", "scheme", "bad-token-wins", "jwt-wrong-key", "basic"],
)
async def test_rejected_credentials_are_401_auth_failed(make_coordinator, headers) -> None:
    fc = make_coordinator(emit_events=False)
    async with client(fc, headers=headers) as http:
        resp = await http.put("/api/worker", json=registration())
    assert resp.status_code == 401
    body = resp.json()
    assert body["type"] == "https://api.backend.ai/probs/auth-failed"
    assert body["error_code"] == "agent_auth_unauthorized"
    assert "title" in body
    assert fc.workers() == []


# -- worker API (§1) ----------------------------------------------------------------


async def test_register_heartbeat_reregister_and_delete(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    async with client(fc) as http:
        resp = await http.put("/api/worker", json=registration())
        assert resp.status_code == 200
        first = resp.json()
        uuid.UUID(first["id"])
        assert first["available_slots"] == -1
        assert first["occupied_slots"] == 0
        assert first["nodes"] == 1
        assert first["slots"] == []
        assert first["accepted_traffics"] == ["inference"]
        assert "status" not in first and "app_filters" not in first
        assert {"created_at", "updated_at", "wildcard_domain"} <= set(first)

        # Re-register: same id, nodes += 1, accepted_traffics never updated.
        again = (
            await http.put(
                "/api/worker",
                json=registration(
                    hostname="other.test",
                    accepted_traffics=["inference", "interactive"],
                ),
            )
        ).json()
        assert again["id"] == first["id"]
        assert again["nodes"] == 2
        assert again["hostname"] == "other.test"
        assert again["accepted_traffics"] == ["inference"]

        wid = first["id"]
        assert (await http.patch(f"/api/worker/{wid}")).json()["id"] == wid
        assert (await http.get(f"/api/worker/{wid}")).json()["nodes"] == 2
        listed = (await http.get("/api/worker")).json()["workers"]
        assert [w["id"] for w in listed] == [wid]
        assert (await http.get(f"/api/worker/{wid}/circuits")).json() == {"circuits": []}

        assert (await http.delete(f"/api/worker/{wid}")).json() == {"success": True}
        assert fc.worker(AUTHORITY)["nodes"] == 1
        assert fc.worker(AUTHORITY)["status"] == "ALIVE"
        await http.delete(f"/api/worker/{wid}")
        assert fc.worker(AUTHORITY)["status"] == "LOST"


@pytest.mark.parametrize(
    ("method", "suffix"),
    [("GET", ""), ("PATCH", ""), ("DELETE", ""), ("GET", "/circuits")],
)
async def test_unknown_worker_is_404_e00002(make_coordinator, method, suffix) -> None:
    fc = make_coordinator(emit_events=False)
    async with client(fc) as http:
        resp = await http.request(method, f"/api/worker/{uuid.uuid4()}{suffix}")
    assert resp.status_code == 404
    assert resp.json()["title"] == "E00002: No such worker."
    assert resp.json()["error_code"] == "agent_read_not-found"


async def test_invalid_registration_body_is_400(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    async with client(fc) as http:
        resp = await http.put("/api/worker", json={"authority": "x"})
        assert resp.status_code == 400
        assert resp.json()["msg"] == "Input validation error"
        resp = await http.put("/api/worker", content=b"{not json")
        assert resp.json()["msg"] == "Malformed body"


# -- circuit creation and the ack wait (§4) -----------------------------------------


@pytest.mark.parametrize("fmt", ["payload", "args"])
async def test_create_is_acked_and_returns_200(make_coordinator, channel, fmt) -> None:
    fc = make_coordinator(event_format=fmt)
    endpoint_id = str(uuid.uuid4())
    async with client(fc) as http, Responder(channel) as worker:
        wid = await register(http)
        resp = await create(http, create_item(endpoint_id, service_name="llama"))
        assert resp.status_code == 200, resp.text
        assert resp.json() == {
            "endpoints": [
                {
                    "deployment_id": endpoint_id,
                    "url": "http://llama.models.test:8000/",
                    "health_check_enabled": False,
                }
            ]
        }
        [created] = worker.named(CREATED)
        assert created.fmt == fmt
        assert created.authority == AUTHORITY
        [circuit] = created.circuits
        assert list(circuit) == CIRCUIT_KEYS
        assert circuit["route_info"] == []
        assert circuit["subdomain"] == "llama"
        assert circuit["endpoint_id"] == endpoint_id
        assert circuit["worker"] == wid
        assert circuit["app_mode"] == "inference"
        assert circuit["runtime_variant"] == "vllm"
        assert Circuit.model_validate(circuit).subdomain == "llama"
        assert [a.circuit_ids for a in fc.acks()] == [[circuit["id"]]]

        pulled = (await http.get(f"/api/worker/{wid}/circuits")).json()["circuits"]
        assert pulled == [circuit]
        slots = (await http.get(f"/api/worker/{wid}")).json()["slots"]
        assert slots == [
            {
                "frontend_mode": "wildcard",
                "in_use": True,
                "port": None,
                "subdomain": "llama",
                "circuit_id": circuit["id"],
            }
        ]

        # Re-sending the same endpoint: 200, same URL, no new event.
        again = await create(http, create_item(endpoint_id, service_name="llama"))
        assert again.status_code == 200
        assert again.json()["endpoints"][0]["url"] == "http://llama.models.test:8000/"
        assert len(fc.events(CREATED)) == 1


async def test_no_ack_is_503_e10001_and_the_row_is_kept(make_coordinator, channel) -> None:
    fc = make_coordinator(ack_timeout=0.5)
    endpoint_id = str(uuid.uuid4())
    async with client(fc) as http, Responder(channel, mode="silent") as worker:
        wid = await register(http)
        resp = await create(http, create_item(endpoint_id))
        assert resp.status_code == 503
        body = resp.json()
        assert body["msg"] == "E10001: Proxy worker not responding"
        assert body["data"] == {"worker": AUTHORITY}
        assert body["error_code"] == "agent_generic_unavailable"
        assert body["type"] == "https://api.backend.ai/probs/service-unavailable"
        assert len(worker.named(CREATED)) == 1

        # The row is committed: the pull sees it; a re-send is 200 with no event.
        circuits = (await http.get(f"/api/worker/{wid}/circuits")).json()["circuits"]
        assert [c["endpoint_id"] for c in circuits] == [endpoint_id]
        again = await create(http, create_item(endpoint_id))
        assert again.status_code == 200
        assert len(fc.events(CREATED)) == 1


@pytest.mark.parametrize("mode", ["ids", "other-format"])
async def test_undecodable_acks_are_dropped(make_coordinator, channel, mode) -> None:
    """An ack with only ids, or in the other envelope, never satisfies the wait."""
    fc = make_coordinator(ack_timeout=0.5, event_format="payload")
    async with client(fc) as http, Responder(channel, mode=mode):
        await register(http)
        resp = await create(http, create_item(str(uuid.uuid4())))
        assert resp.status_code == 503
        await eventually(lambda: fc.dropped())
        assert fc.acks() == []


async def test_ack_for_another_circuit_does_not_count(make_coordinator, channel) -> None:
    fc = make_coordinator(ack_timeout=0.5)
    async with client(fc) as http, Responder(channel, authority="someone-else"):
        await register(http)
        resp = await create(http, create_item(str(uuid.uuid4())))
        assert resp.status_code == 503


async def test_subdomain_collision_gets_a_suffix(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    async with client(fc) as http:
        await register(http)
        resp = await create(
            http,
            create_item(str(uuid.uuid4()), "svc"),
            create_item(str(uuid.uuid4()), "svc"),
        )
        urls = [e["url"] for e in resp.json()["endpoints"]]
    assert urls[0] == "http://svc.models.test:8000/"
    assert urls[1].startswith("http://svc-") and urls[1] != urls[0]


async def test_existing_url_pins_the_subdomain(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    async with client(fc) as http:
        await register(http)
        item = create_item(str(uuid.uuid4()), "svc")
        item["tags"]["endpoint"]["existing_url"] = "http://kept.models.test:8000/"
        resp = await create(http, item)
    assert resp.json()["endpoints"][0]["url"] == "http://kept.models.test:8000/"


async def test_no_worker_is_503_worker_not_available(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    async with client(fc) as http:
        resp = await create(http, create_item(str(uuid.uuid4())))
    assert resp.status_code == 503
    assert resp.json()["title"] == "Worker not available."
    assert fc.circuits() == []


async def test_single_endpoint_create_route(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    endpoint_id = str(uuid.uuid4())
    async with client(fc) as http:
        await register(http)
        item = create_item(endpoint_id, "single")
        del item["deployment_id"]
        resp = await http.post(f"/v2/endpoints/{endpoint_id}", json=item)
    assert resp.status_code == 200
    assert resp.json() == {
        "success": True,
        "endpoint": "http://single.models.test:8000/",
        "health_check_enabled": False,
    }


# -- routes and removal (§6) --------------------------------------------------------


@pytest.mark.parametrize("fmt", ["payload", "args"])
async def test_route_changes_publish_the_full_list(make_coordinator, channel, fmt) -> None:
    fc = make_coordinator(event_format=fmt)
    endpoint_id = str(uuid.uuid4())
    a, b = route_entry(kernel_port=8001), route_entry(kernel_port=8002)
    async with client(fc) as http, Responder(channel) as worker:
        wid = await register(http)
        assert (await create(http, create_item(endpoint_id))).status_code == 200

        resp = await http.post(
            "/v2/endpoints/bulk/routes",
            json={"endpoints": [{"deployment_id": endpoint_id, "routes": [a, b]}]},
        )
        assert resp.json() == {"endpoints": [{"deployment_id": endpoint_id, "success": True, "error": None}]}
        [update] = await eventually(lambda: worker.named(ROUTE_UPDATED))
        assert update.fmt == fmt
        assert update.authority == AUTHORITY
        assert update.circuit is not None and update.circuit["endpoint_id"] == endpoint_id
        assert update.routes == [
            {
                "route_id": r["route_id"],
                "session_id": r["session_id"],
                "session_name": None,
                "kernel_host": "10.0.0.5",
                "kernel_port": r["kernel_port"],
                "protocol": "http",
                "traffic_ratio": 1.0,
            }
            for r in (a, b)
        ]
        assert update.circuit["route_info"] == update.routes

        # register appends (idempotent on route_id); the event carries all routes.
        c = route_entry(kernel_port=8003)
        await http.post(
            "/v2/endpoints/bulk/routes/register",
            json={"endpoints": [{"deployment_id": endpoint_id, "routes": [a, c]}]},
        )
        await eventually(lambda: len(worker.named(ROUTE_UPDATED)) == 2)
        ports = [r["kernel_port"] for r in worker.named(ROUTE_UPDATED)[1].routes or []]
        assert ports == [8001, 8002, 8003]

        await http.post(
            "/v2/endpoints/bulk/routes/unregister",
            json={"endpoints": [{"deployment_id": endpoint_id, "route_ids": [a["route_id"]]}]},
        )
        await eventually(lambda: len(worker.named(ROUTE_UPDATED)) == 3)
        ports = [r["kernel_port"] for r in worker.named(ROUTE_UPDATED)[2].routes or []]
        assert ports == [8002, 8003]

        pulled = (await http.get(f"/api/worker/{wid}/circuits")).json()["circuits"]
        assert [r["kernel_port"] for r in pulled[0]["route_info"]] == [8002, 8003]


async def test_routes_for_an_unknown_endpoint_fail_per_item(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    missing = str(uuid.uuid4())
    async with client(fc) as http:
        resp = await http.post(
            "/v2/endpoints/bulk/routes",
            json={"endpoints": [{"deployment_id": missing, "routes": [route_entry()]}]},
        )
    [item] = resp.json()["endpoints"]
    assert item["deployment_id"] == missing
    assert item["success"] is False and item["error"]


async def test_delete_publishes_removed(make_coordinator, channel) -> None:
    fc = make_coordinator()
    one, two = str(uuid.uuid4()), str(uuid.uuid4())
    async with client(fc) as http, Responder(channel) as worker:
        wid = await register(http)
        assert (await create(http, create_item(one, "one"))).status_code == 200
        assert (await create(http, create_item(two, "two"))).status_code == 200
        ids = {c["endpoint_id"]: c["id"] for c in fc.circuits()}

        assert (await http.delete(f"/v2/endpoints/{one}")).json() == {"success": True}
        [removed] = await eventually(lambda: worker.named(REMOVED))
        assert removed.authority == AUTHORITY
        assert removed.circuit_ids == [ids[one]]

        resp = await http.request(
            "DELETE",
            "/v2/endpoints/bulk",
            json={"endpoints": [{"deployment_id": two}, {"deployment_id": one}]},
        )
        assert [e["success"] for e in resp.json()["endpoints"]] == [True, True]
        await eventually(lambda: len(worker.named(REMOVED)) == 2)
        assert worker.named(REMOVED)[1].circuit_ids == [ids[two]]
        assert (await http.get(f"/api/worker/{wid}/circuits")).json() == {"circuits": []}
        assert fc.worker(AUTHORITY)["occupied_slots"] == 0


async def test_health_check_update(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    endpoint_id = str(uuid.uuid4())
    async with client(fc) as http:
        await register(http)
        await create(http, create_item(endpoint_id))
        resp = await http.put(
            f"/v2/endpoints/{endpoint_id}/health-check",
            json={"health_check": {"path": "/health"}},
        )
        assert resp.json() == {"success": True}
        missing = await http.put(f"/v2/endpoints/{uuid.uuid4()}/health-check", json={"health_check": None})
        assert missing.status_code == 404


# -- token (§5.2) --------------------------------------------------------------------


async def test_minted_token_verifies_for_its_circuit_only(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    endpoint_id = str(uuid.uuid4())
    user = str(uuid.uuid4())
    async with client(fc) as http:
        await register(http)
        await create(http, create_item(endpoint_id))
        resp = await http.post(
            f"/v2/endpoints/{endpoint_id}/token",
            json={"user_uuid": user, "exp": int(time.time()) + 600},
        )
    token = resp.json()["token"]
    circuit = fc.circuit_for_endpoint(endpoint_id)
    assert circuit is not None
    claims = verify_circuit_token(f"Bearer {token}", circuit_id=circuit["id"], secret=JWT_SECRET)
    assert claims["user"] == user
    assert claims["app_url"] == "http://llama.models.test:8000/"
    assert "route_info" not in claims
    assert claims["endpoint_id"] == endpoint_id
    with pytest.raises(InvalidToken):
        verify_circuit_token(f"Bearer {token}", circuit_id=circuit["id"], secret=API_SECRET)


# -- heartbeat and LOST (§7.1) -------------------------------------------------------


async def test_lost_after_heartbeat_timeout_and_revived_by_patch(make_coordinator, channel) -> None:
    fc = make_coordinator(heartbeat_timeout=0.3, lost_check_interval=0.05)
    async with client(fc) as http, Responder(channel):
        wid = await register(http)
        assert (await http.patch(f"/api/worker/{wid}")).status_code == 200
        await eventually(lambda: fc.worker(AUTHORITY)["status"] == "LOST")

        resp = await create(http, create_item(str(uuid.uuid4())))
        assert resp.status_code == 503
        assert resp.json()["title"] == "Worker not available."

        assert (await http.patch(f"/api/worker/{wid}")).status_code == 200
        assert fc.worker(AUTHORITY)["status"] == "ALIVE"
        resp = await create(http, create_item(str(uuid.uuid4())))
        assert resp.status_code == 200, resp.text


async def test_put_alone_records_no_heartbeat(make_coordinator) -> None:
    """Only PATCH writes last_seen, so a never-patched worker is never LOST."""
    fc = make_coordinator(emit_events=False)
    async with client(fc) as http:
        await register(http)
    assert check_lost_workers(fc.state, 0.0, now=time.monotonic() + 3600) == []
    assert fc.worker(AUTHORITY)["status"] == "ALIVE"


# -- test knobs and lifecycle --------------------------------------------------------


async def test_suppressed_event_is_not_published_and_pull_shows_the_truth(make_coordinator, channel) -> None:
    fc = make_coordinator()
    endpoint_id = str(uuid.uuid4())
    lost, seen = route_entry(kernel_port=9001), route_entry(kernel_port=9002)
    async with client(fc) as http, Responder(channel) as worker:
        wid = await register(http)
        assert (await create(http, create_item(endpoint_id))).status_code == 200

        fc.suppress_next_event()
        body = {"endpoints": [{"deployment_id": endpoint_id, "routes": [lost]}]}
        await http.post("/v2/endpoints/bulk/routes", json=body)
        assert fc.events(ROUTE_UPDATED)[-1].suppressed
        pulled = (await http.get(f"/api/worker/{wid}/circuits")).json()["circuits"]
        assert [r["kernel_port"] for r in pulled[0]["route_info"]] == [9001]

        body = {"endpoints": [{"deployment_id": endpoint_id, "routes": [seen]}]}
        await http.post("/v2/endpoints/bulk/routes", json=body)
        # Pub/Sub keeps order: seeing the second proves the first never went out.
        [update] = await eventually(lambda: worker.named(ROUTE_UPDATED))
        assert [r["kernel_port"] for r in update.routes or []] == [9002]


async def test_traffic_ratio_knob(make_coordinator, channel) -> None:
    fc = make_coordinator()
    endpoint_id = str(uuid.uuid4())
    entry = route_entry()
    async with client(fc) as http, Responder(channel) as worker:
        wid = await register(http)
        await create(http, create_item(endpoint_id))
        body = {"endpoints": [{"deployment_id": endpoint_id, "routes": [entry]}]}
        await http.post("/v2/endpoints/bulk/routes", json=body)
        await eventually(lambda: worker.named(ROUTE_UPDATED))
        events_before = len(fc.events())

        fc.set_traffic_ratio(endpoint_id, entry["route_id"], 0.25)
        pulled = (await http.get(f"/api/worker/{wid}/circuits")).json()["circuits"]
        assert pulled[0]["route_info"][0]["traffic_ratio"] == 0.25
        assert len(fc.events()) == events_before  # silent by default

        fc.set_traffic_ratio(endpoint_id, entry["route_id"], 3.0, emit=True)
        await eventually(lambda: len(worker.named(ROUTE_UPDATED)) == 2)
        assert (worker.named(ROUTE_UPDATED)[1].routes or [])[0]["traffic_ratio"] == 3.0

        # The same knobs over HTTP, for a coordinator run from the CLI.
        resp = await http.post(
            "/_test/traffic-ratio",
            json={"endpoint_id": endpoint_id, "route_id": entry["route_id"],
                  "traffic_ratio": 0.5},
        )  # fmt: skip
        assert resp.json()["route_info"][0]["traffic_ratio"] == 0.5
        assert (await http.post("/_test/suppress", json={"count": 2})).json() == {"suppress": 2}
        state = (await http.get("/_test/state")).json()
        assert state["workers"][0]["status"] == "ALIVE"
        assert state["suppress"] == 2
        assert [e["name"] for e in state["events"]][:1] == [CREATED]


async def test_emit_events_off_means_no_events_and_no_ack_wait(
    make_coordinator,
) -> None:
    fc = make_coordinator(emit_events=False, ack_timeout=60.0)
    async with client(fc) as http:
        await register(http)
        resp = await create(http, create_item(str(uuid.uuid4())))
    assert resp.status_code == 200
    assert fc.events() == []


def test_restart_keeps_state_and_port(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    url = fc.url
    with httpx.Client(base_url=url, headers=fc.headers) as http:
        wid = http.put("/api/worker", json=registration()).json()["id"]
    fc.stop()
    assert not fc.running
    fc.start()
    assert fc.url == url
    with httpx.Client(base_url=fc.url, headers=fc.headers) as http:
        assert http.get(f"/api/worker/{wid}").status_code == 200


def test_unknown_paths_are_404_json(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    with httpx.Client(base_url=fc.url, headers=fc.headers) as http:
        resp = http.get("/nope")
    assert resp.status_code == 404
    assert resp.json()["title"] == "Unknown URL path."


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_serves_the_api(channel) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "fakes.coordinator",
            "--port", str(port), "--api-secret", API_SECRET,
            "--jwt-secret", JWT_SECRET, "--redis-url", REDIS_URL,
            "--channel", channel, "--event-format", "args",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        headers = {"X-BackendAI-Token": API_SECRET}
        while True:
            try:
                resp = httpx.get(f"http://127.0.0.1:{port}/api/worker", headers=headers)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(proc.stderr.read() if proc.stderr else "") from None
                time.sleep(0.05)
        assert resp.json() == {"workers": []}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert API_SECRET not in stderr and JWT_SECRET not in stderr


def test_cli_requires_secrets(monkeypatch) -> None:
    monkeypatch.delenv("APPPROXY_API_SECRET", raising=False)
    monkeypatch.delenv("APPPROXY_JWT_SECRET", raising=False)
    with pytest.raises(SystemExit) as info:
        main(["--port", "1"])
    assert info.value.code == 2
