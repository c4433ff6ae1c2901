"""The fake coordinator's ROUTER mode (BEP-1053) against real Redis, over HTTP.

Router nodes are simulated: registrations and heartbeats over HTTP, acks
published on the bus by ``RouterNodes`` (each message encoded here, by hand,
independently of both the fake's codec and the product's). Waits poll a
condition with a generous deadline; ack timeouts are short.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any, Self

import httpx
import msgpack
import pytest
import redis.asyncio as aioredis

from fakes.coordinator import router_events
from tests.fakes.test_coordinator import (
    API_SECRET,
    REDIS_URL,
    ROOT,
    Responder,
    client,
    create,
    create_item,
    eventually,
    registration,
    route_entry,
)

AUTH = "continuum-router-1"
NODE_A = "b3f1c0de-0000-4000-8000-00000000000a"
NODE_B = "b3f1c0de-0000-4000-8000-00000000000b"
EP1 = "33333333-3333-4333-8333-333333333333"
EP2 = "44444444-4444-4444-8444-444444444444"
HASH = hashlib.sha256(b"sk-test-key-material-0001").hexdigest()
MODELS = f"/v2/routers/{AUTH}/models"
KEYS = f"/v2/routers/{AUTH}/api-keys"
PROBS = "https://api.backend.ai/probs/invalid-api-params"


def router_body(node_id: str = NODE_A, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "authority": AUTH,
        "frontend_mode": "router",
        "protocol": "http",
        "hostname": "router.example.com",
        "tls_listen": False,
        "tls_advertised": True,
        "api_port": 8080,
        "traffic_port": 443,
        "node_id": node_id,
        "accepted_traffics": ["inference"],
        "filtered_apps_only": False,
        "app_filters": [],
        "port_range": None,
        "wildcard_domain": None,
        "wildcard_traffic_port": None,
        "traefik_last_used_marker_path": None,
    }
    body.update(over)
    return body


async def register_node(http: httpx.AsyncClient, node_id: str = NODE_A, **over: Any) -> str:
    resp = await http.put("/api/worker", json=router_body(node_id, **over))
    assert resp.status_code == 200, resp.text
    return resp.json()["id"]


def ack_message(fmt: str, node_id: str | None, kind: str, entity: str, authority: str = AUTH) -> bytes:
    name = "appproxy_worker_router_config_applied_event"
    if fmt == "payload":
        body: dict[str, Any] = {"target_worker_authority": authority, "kind": kind, "id": entity}
        if node_id is not None:
            body["node_id"] = node_id
        msg = {"name": name, "source": "appproxy-worker", "payload": json.dumps(body)}
    else:
        args = [authority, kind, entity] if node_id is None else [authority, node_id, kind, entity]
        msg = {"name": name, "source": "appproxy-worker", "args": base64.b64encode(msgpack.packb(args)).decode()}
    msg["metadata"] = json.dumps({"request_id": None, "user": None, "triggered_user": None})
    return json.dumps(msg).encode()


def decode_router_event(raw: bytes) -> tuple[str, str, list[Any]]:
    """(name, format, [authority, value]) decoded by hand; value parsed if JSON."""
    msg = json.loads(raw)
    if "payload" in msg:
        body = json.loads(msg["payload"])
        authority = body.pop("target_worker_authority")
        return msg["name"], "payload", [authority, body]
    args = msgpack.unpackb(base64.b64decode(msg["args"]), raw=False)
    assert all(isinstance(a, str) for a in args)
    return msg["name"], "args", args


class RouterNodes:
    """Simulated router nodes on the bus: record ROUTER events; each node in
    ``ackers`` acks every event (in ``fmt``, with ``kind``)."""

    def __init__(self, channel: str, ackers: tuple[str | None, ...] = (), fmt: str = "args", kind: str = "") -> None:
        self.channel = channel
        self.ackers = ackers
        self.fmt = fmt
        self.kind = kind
        self.raw: list[bytes] = []
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
            data = msg["data"]
            name = json.loads(data).get("name", "")
            if name not in router_events.OUTBOUND:
                continue
            self.raw.append(data)
            _, _, args = decode_router_event(data)
            value = args[1]
            if isinstance(value, dict):  # the payload body: its one field
                [value] = value.values()
            if isinstance(value, str) and value.startswith("{"):
                value = json.loads(value)
            entity = value["model"] if isinstance(value, dict) else value
            kind = self.kind or ("model" if "model" in name else "key")
            for node in self.ackers:
                await self.publish(ack_message(self.fmt, node, kind, entity, args[0]))

    async def publish(self, data: bytes) -> None:
        await self.client.publish(self.channel, data)

    def names(self) -> list[str]:
        return [json.loads(r)["name"] for r in self.raw]

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.pubsub.aclose()
        await self.client.aclose()


def model_body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "aliases": ["llama-4"],
        "mappings": [{"endpoint_id": EP1, "ratio": 0.7}, {"endpoint_id": EP2, "ratio": 0.3}],
        "control_mode": "manual",
    }
    body.update(over)
    return body


def key_body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "token_hash": HASH,
        "allowed_models": ["llama-4-chat"],
        "expires_at": "2026-12-31T23:59:59Z",
        "rate_limit": 600,
        "allowed_client_ips": ["10.0.0.0/8"],
        "display_hint": "sk-…0001",
    }
    body.update(over)
    return body


def assert_invalid(resp: httpx.Response) -> dict[str, Any]:
    assert resp.status_code == 400, resp.text
    body = resp.json()
    assert body["type"] == PROBS
    assert body["error_code"] == "agent_request_invalid-parameters"
    return body


# -- the codec against the reference's examples (router-mode.md §1.3) -------------


def test_args_encoding_reproduces_the_reference_examples() -> None:
    assert router_events.pack_args(["worker01", "[]"]) == "kqh3b3JrZXIwMaJbXQ=="
    assert router_events.pack_args([AUTH, "key-abc"]) == "krJjb250aW51dW0tcm91dGVyLTGna2V5LWFiYw=="
    assert router_events.pack_args([AUTH, "llama-4-chat"]) == "krJjb250aW51dW0tcm91dGVyLTGsbGxhbWEtNC1jaGF0"
    ack = [AUTH, "b3f1c0de-0000-4000-8000-000000000001", "key", "key-abc"]
    assert router_events.pack_args(ack) == (
        "lLJjb250aW51dW0tcm91dGVyLTHZJGIzZjFjMGRlLTAwMDAtNDAwMC04MDAwLTAwMDAwMDAwMDAwMaNrZXmna2V5LWFiYw=="
    )
    model = {
        "model": "llama-4-chat",
        "aliases": ["llama-4"],
        "mappings": [{"endpoint_id": EP1, "ratio": 0.7}],
        "control_mode": "manual",
    }
    updated = json.loads(router_events.encode(router_events.MODEL_UPDATED, "args", AUTH, model))
    assert updated["args"] == (
        "krJjb250aW51dW0tcm91dGVyLTHZlnsibW9kZWwiOiJsbGFtYS00LWNoYXQiLCJhbGlhc2VzIjpbImxsYW1hLTQiXSwibWFwcGluZ3MiOlt7"
        "ImVuZHBvaW50X2lkIjoiMzMzMzMzMzMtMzMzMy00MzMzLTgzMzMtMzMzMzMzMzMzMzMzIiwicmF0aW8iOjAuN31dLCJjb250cm9sX21vZGUi"
        "OiJtYW51YWwifQ=="
    )
    whole = router_events.encode(router_events.KEY_UPDATED, "args", AUTH, "key-abc")
    assert whole == (
        b'{"name":"appproxy_router_key_updated_event","source":"appproxy-coordinator",'
        b'"args":"krJjb250aW51dW0tcm91dGVyLTGna2V5LWFiYw==",'
        b'"metadata":"{\\"request_id\\":null,\\"user\\":null,\\"triggered_user\\":null}"}'
    )
    payload = json.loads(router_events.encode(router_events.MODEL_REMOVED, "payload", AUTH, "llama-4-chat"))
    assert json.loads(payload["payload"]) == {"target_worker_authority": AUTH, "model_name": "llama-4-chat"}
    assert "traceparent" in json.loads(payload["metadata"])


# -- registration and per-node liveness -----------------------------------------------


async def test_router_registration_shares_the_id_and_tracks_each_node(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    async with client(fc) as http:
        first = (await http.put("/api/worker", json=router_body(NODE_A))).json()
        wid = first["id"]
        assert first["frontend_mode"] == "router"
        assert first["traffic_port"] == 443
        assert first["slots"] == [] and first["available_slots"] == -1
        assert [n["node_id"] for n in first["nodes"]] == [NODE_A]
        assert await register_node(http, NODE_B) == wid

        info = (await http.get(f"/api/worker/{wid}")).json()
        assert [n["node_id"] for n in info["nodes"]] == [NODE_A, NODE_B]
        assert all(n["last_seen"].endswith("Z") for n in info["nodes"])

        # Heartbeat: body or query names the node; without one it is 400.
        assert (await http.patch(f"/api/worker/{wid}", json={"node_id": NODE_A})).status_code == 200
        assert (await http.patch(f"/api/worker/{wid}", params={"node_id": NODE_B})).status_code == 200
        assert_invalid(await http.patch(f"/api/worker/{wid}"))

        # DELETE drops only that node; LOST once none is left.
        assert (await http.delete(f"/api/worker/{wid}", params={"node_id": NODE_A})).json() == {"success": True}
        info = (await http.get(f"/api/worker/{wid}")).json()
        assert [n["node_id"] for n in info["nodes"]] == [NODE_B]
        assert fc.worker(AUTH)["status"] == "ALIVE"
        assert_invalid(await http.delete(f"/api/worker/{wid}"))
        resp = await http.request("DELETE", f"/api/worker/{wid}", json={"node_id": NODE_B})
        assert resp.status_code == 200
        assert fc.worker(AUTH)["status"] == "LOST"
        assert (await http.get(f"/api/worker/{wid}")).json()["nodes"] == []

        # A heartbeat revives it; traffic_port 0 means api_port.
        await http.patch(f"/api/worker/{wid}", json={"node_id": NODE_A})
        assert fc.worker(AUTH)["status"] == "ALIVE"
        again = (await http.put("/api/worker", json=router_body(NODE_A, traffic_port=0))).json()
        assert again["traffic_port"] == 8080 and again["id"] == wid


async def test_router_nodes_expire_after_the_heartbeat_timeout(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False, heartbeat_timeout=1.0, lost_check_interval=0.1)
    async with client(fc) as http:
        wid = await register_node(http, NODE_A)
        await register_node(http, NODE_B)

        async def nodes() -> list[str]:
            return [n["node_id"] for n in (await http.get(f"/api/worker/{wid}")).json()["nodes"]]

        # Keep A alive while B's entry runs out.
        deadline = time.monotonic() + 20
        while await nodes() != [NODE_A]:
            assert time.monotonic() < deadline, "B never expired"
            await http.patch(f"/api/worker/{wid}", json={"node_id": NODE_A})
            await asyncio.sleep(0.05)
        assert fc.worker(AUTH)["status"] == "ALIVE"
        # Then A too: the worker becomes LOST (the timer runs the check).
        await eventually(lambda: fc.worker(AUTH)["status"] == "LOST", timeout=20)
        assert await nodes() == []
        await http.patch(f"/api/worker/{wid}", json={"node_id": NODE_B})
        assert fc.worker(AUTH)["status"] == "ALIVE"
        assert await nodes() == [NODE_B]


@pytest.mark.parametrize(
    "over",
    [{"port_range": [10000, 10010]}, {"wildcard_domain": ".x.test"}, {"wildcard_traffic_port": 80}, {"node_id": None}],
    ids=["port_range", "wildcard_domain", "wildcard_traffic_port", "no-node_id"],
)
async def test_router_registration_rejects_slot_fields_and_a_missing_node(make_coordinator, over) -> None:
    fc = make_coordinator(emit_events=False)
    async with client(fc) as http:
        body = assert_invalid(await http.put("/api/worker", json=router_body(**over)))
    assert body["title"] == "Missing or invalid API parameters."
    assert fc.workers() == []


async def test_router_and_stock_inference_workers_never_share_a_coordinator(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    async with client(fc) as http:
        assert (await http.put("/api/worker", json=registration())).status_code == 200
        assert_invalid(await http.put("/api/worker", json=router_body()))
    fc2 = make_coordinator(emit_events=False)
    async with client(fc2) as http:
        await register_node(http)
        assert_invalid(await http.put("/api/worker", json=registration()))
        # An interactive-only stock worker may share it.
        interactive = registration(authority="interactive01", accepted_traffics=["interactive"])
        assert (await http.put("/api/worker", json=interactive)).status_code == 200
        # A stock authority cannot turn into a router one.
        assert_invalid(await http.put("/api/worker", json=router_body(authority="interactive01")))


# -- snapshot ------------------------------------------------------------------------------


async def test_snapshot_200_304_revisions_and_counts(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    async with client(fc) as http:
        wid = await register_node(http)
        url = f"/api/worker/{wid}/router-config"
        assert (await http.get(url)).json() == {"revision": "0", "models": [], "api_keys": []}

        resp = await http.put(f"{MODELS}/llama-4-chat", json=model_body())
        assert resp.json() == {"success": True, "revision": 1, "propagation": "deferred", "acked_by": None}
        snap = (await http.get(url, params={"known_revision": "0"})).json()
        assert snap == {
            "revision": "1",
            "models": [
                {
                    "model": "llama-4-chat",
                    "aliases": ["llama-4"],
                    "mappings": [{"endpoint_id": EP1, "ratio": 0.7}, {"endpoint_id": EP2, "ratio": 0.3}],
                    "control_mode": "manual",
                }
            ],
            "api_keys": [],
        }
        resp = await http.get(url, params={"known_revision": "1"})
        assert resp.status_code == 304 and resp.content == b""

        assert (await http.put(f"{KEYS}/key-abc", json=key_body())).json()["revision"] == 2
        snap = (await http.get(url, params={"known_revision": "1"})).json()
        assert snap["revision"] == "2"
        assert snap["api_keys"] == [
            {
                "key_id": "key-abc",
                "token_hash": HASH,
                "allowed_models": ["llama-4-chat"],
                "expires_at": "2026-12-31T23:59:59Z",
                "rate_limit": 600,
                "allowed_client_ips": ["10.0.0.0/8"],
            }
        ]
        assert (await http.get(url, params={"known_revision": "2"})).status_code == 304

        # The spelling knob: kebab-case, publications, api-keys, numeric revision.
        assert (await http.post("/_test/router-spelling", json={"alt": True})).json() == {"alt": True}
        alt = (await http.get(url)).json()
        assert alt["revision"] == 2
        assert set(alt) == {"revision", "publications", "api-keys"}
        assert alt["publications"][0]["control-mode"] == "manual"
        assert alt["publications"][0]["mappings"][0] == {"endpoint-id": EP1, "ratio": 0.7}
        assert set(alt["api-keys"][0]) == {
            "key-id", "token-hash", "allowed-models", "expires-at", "rate-limit", "allowed-client-ips",
        }  # fmt: skip
        await http.post("/_test/router-spelling", json={"alt": False})
        assert "models" in (await http.get(url)).json()

        view = (await http.get("/_test/router")).json()
        assert view["pulls"] == {wid: {"200": 5, "304": 2}}
        assert view["authorities"][AUTH]["revision"] == 2
        assert HASH not in json.dumps(view)

        # Stock workers get no router-config; unknown ids are 404.
        assert (await http.get(f"/api/worker/{uuid.uuid4()}/router-config")).status_code == 404


async def test_a_stock_worker_gets_no_router_config(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    async with client(fc) as http:
        wid = (await http.put("/api/worker", json=registration(accepted_traffics=["interactive"]))).json()["id"]
        assert_invalid(await http.get(f"/api/worker/{wid}/router-config"))


# -- Manager API ---------------------------------------------------------------------------


async def test_models_crud_and_validation(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    async with client(fc) as http:
        assert (await http.get(MODELS)).json() == {"models": [], "revision": 0}
        assert (await http.put(f"{MODELS}/llama-4-chat", json=model_body())).status_code == 200
        # Defaults: no aliases, ratio 1.0, manual; names with a slash work.
        resp = await http.put(f"{MODELS}/org/qwen", json={"mappings": [{"endpoint_id": EP2}]})
        assert resp.json()["revision"] == 2
        listed = (await http.get(MODELS)).json()
        assert listed["revision"] == 2
        assert [m["model"] for m in listed["models"]] == ["llama-4-chat", "org/qwen"]
        assert listed["models"][1] == {
            "model": "org/qwen",
            "aliases": [],
            "mappings": [{"endpoint_id": EP2, "ratio": 1.0}],
            "control_mode": "manual",
        }

        # Names are unique across primaries and aliases.
        assert "llama-4" in assert_invalid(await http.put(f"{MODELS}/other", json={"aliases": ["llama-4"]}))["msg"]
        assert_invalid(await http.put(f"{MODELS}/llama-4", json={}))
        assert_invalid(await http.put(f"{MODELS}/third", json={"aliases": ["org/qwen"]}))
        assert_invalid(await http.put(f"{MODELS}/dup", json={"aliases": ["dup"]}))
        # Re-publishing a model may keep its own aliases.
        assert (
            await http.put(f"{MODELS}/llama-4-chat", json=model_body(control_mode="strategy-managed"))
        ).status_code == 200
        # Bad ratios, endpoint ids and control modes.
        assert_invalid(await http.put(f"{MODELS}/m", json={"mappings": [{"endpoint_id": EP1, "ratio": -0.1}]}))
        assert_invalid(await http.put(f"{MODELS}/m", json={"mappings": [{"endpoint_id": "nope"}]}))
        assert_invalid(await http.put(f"{MODELS}/m", json={"control_mode": "auto"}))
        assert_invalid(
            await http.put(
                f"{MODELS}/m", content=b'{"mappings": [{"endpoint_id": "' + EP1.encode() + b'", "ratio": NaN}]}'
            )
        )
        assert (await http.get(MODELS)).json()["revision"] == 3

        # DELETE removes; a missing one is a no-op without a bump.
        resp = await http.delete(f"{MODELS}/llama-4-chat")
        assert resp.json() == {"success": True, "revision": 4, "propagation": "deferred", "acked_by": None}
        resp = await http.delete(f"{MODELS}/llama-4-chat")
        assert resp.json() == {"success": True, "revision": 4, "propagation": "none", "acked_by": None}
        assert [m["model"] for m in (await http.get(MODELS)).json()["models"]] == ["org/qwen"]
        # The freed alias can be taken now.
        assert (await http.put(f"{MODELS}/other", json={"aliases": ["llama-4"]})).status_code == 200

    async with client(fc, headers={}) as anonymous:
        assert (await anonymous.get(MODELS)).status_code == 401
        assert (await anonymous.put(f"{MODELS}/x", json={})).status_code == 401
        assert (await anonymous.get(KEYS)).status_code == 401


async def test_keys_crud_and_validation(make_coordinator) -> None:
    fc = make_coordinator(emit_events=False)
    async with client(fc) as http:
        resp = await http.put(f"{KEYS}/key-abc", json=key_body(expires_at="2026-12-31T23:59:59+09:00"))
        assert resp.json() == {"success": True, "revision": 1, "propagation": "deferred", "acked_by": None}
        await http.put(f"{KEYS}/key-min", json={"token_hash": HASH.replace("a", "b")})
        listed = await http.get(KEYS)
        assert HASH not in listed.text and "token_hash" not in listed.text
        assert listed.json() == {
            "api_keys": [
                {
                    "key_id": "key-abc",
                    "display_hint": "sk-…0001",
                    "allowed_models": ["llama-4-chat"],
                    "expires_at": "2026-12-31T14:59:59Z",
                    "rate_limit": 600,
                    "allowed_client_ips": ["10.0.0.0/8"],
                },
                {
                    "key_id": "key-min",
                    "display_hint": None,
                    "allowed_models": [],
                    "expires_at": None,
                    "rate_limit": None,
                    "allowed_client_ips": None,
                },
            ],
            "revision": 2,
        }

        plain = key_body(token="sk-plaintext-never")
        body = assert_invalid(await http.put(f"{KEYS}/k2", json=plain))
        assert "token_hash" in body["msg"] and "sk-plaintext-never" not in json.dumps(body)
        assert_invalid(await http.put(f"{KEYS}/k2", json={"token": "sk-plaintext-never"}))
        assert_invalid(await http.put(f"{KEYS}/k2", json=key_body(token_hash=HASH.upper())))
        assert_invalid(await http.put(f"{KEYS}/k2", json=key_body(token_hash=HASH[:63])))
        assert_invalid(await http.put(f"{KEYS}/k2", json={"allowed_models": []}))
        assert_invalid(await http.put(f"{KEYS}/k2", json=key_body(allowed_client_ips=["10.0.0.0/33"])))
        assert_invalid(await http.put(f"{KEYS}/k2", json=key_body(rate_limit=0)))
        assert_invalid(await http.put(f"{KEYS}/k2", json=key_body(expires_at="tomorrow")))
        assert (await http.get(KEYS)).json()["revision"] == 2

        resp = await http.delete(f"{KEYS}/key-min", params={"strict": "true"})
        assert resp.json() == {
            "success": True, "revision": 3, "propagation": "deferred", "acked_by": None, "unconfirmed_nodes": [],
        }  # fmt: skip
        resp = await http.delete(f"{KEYS}/key-min", params={"strict": "true"})
        assert resp.json()["revision"] == 3 and resp.json()["propagation"] == "none"
        assert [k["key_id"] for k in (await http.get(KEYS)).json()["api_keys"]] == ["key-abc"]


# -- events, acks and the ack wait -------------------------------------------------------


@pytest.mark.parametrize("fmt", ["args", "payload"])
async def test_each_mutation_publishes_its_event(make_coordinator, channel, fmt) -> None:
    fc = make_coordinator(event_format=fmt, ack_timeout=0.5)
    async with client(fc) as http, RouterNodes(channel) as bus:
        await http.put(f"{MODELS}/llama-4-chat", json=model_body(mappings=[{"endpoint_id": EP1, "ratio": 0.7}]))
        await http.put(f"{KEYS}/key-abc", json=key_body())
        await http.delete(f"{KEYS}/key-abc")
        await http.delete(f"{MODELS}/llama-4-chat")
        await http.delete(f"{MODELS}/llama-4-chat")  # no-op: no event
        await eventually(lambda: len(bus.raw) >= 4)
    decoded = [decode_router_event(r) for r in bus.raw]
    assert [(d[0], d[1]) for d in decoded] == [
        ("appproxy_router_model_updated_event", fmt),
        ("appproxy_router_key_updated_event", fmt),
        ("appproxy_router_key_removed_event", fmt),
        ("appproxy_router_model_removed_event", fmt),
    ]
    entry = {
        "model": "llama-4-chat",
        "aliases": ["llama-4"],
        "mappings": [{"endpoint_id": EP1, "ratio": 0.7}],
        "control_mode": "manual",
    }
    if fmt == "args":
        assert decoded[0][2] == [AUTH, json.dumps(entry, separators=(",", ":"))]
        assert decoded[1][2] == [AUTH, "key-abc"]
        assert decoded[2][2] == [AUTH, "key-abc"]
        assert decoded[3][2] == [AUTH, "llama-4-chat"]
    else:
        assert decoded[0][2] == [AUTH, {"model": entry}]
        assert decoded[1][2] == [AUTH, {"key_id": "key-abc"}]
        assert decoded[2][2] == [AUTH, {"key_id": "key-abc"}]
        assert decoded[3][2] == [AUTH, {"model_name": "llama-4-chat"}]
    for raw in bus.raw:
        assert HASH.encode() not in raw
        assert json.loads(raw)["source"] == "appproxy-coordinator"
    assert [e.entity for e in fc.router_events()] == ["llama-4-chat", "key-abc", "key-abc", "llama-4-chat"]


@pytest.mark.parametrize(
    ("ack_fmt", "node", "kind"),
    [("args", NODE_A, ""), ("payload", NODE_A, ""), ("args", None, ""), ("payload", NODE_A, "{}_updated")],
    ids=["args-4", "payload-4", "args-3-no-node", "payload-kind-suffix"],
)
async def test_a_mutation_returns_acked_on_the_first_ack(make_coordinator, channel, ack_fmt, node, kind) -> None:
    fc = make_coordinator(event_format="payload", ack_timeout=10.0)
    async with client(fc) as http, RouterNodes(channel, ackers=(node,), fmt=ack_fmt) as bus:
        await register_node(http, NODE_A)
        bus.kind = kind.format("model")
        resp = await http.put(f"{MODELS}/llama-4-chat", json=model_body())
        assert resp.json() == {"success": True, "revision": 1, "propagation": "acked", "acked_by": node}
        bus.kind = kind.format("key")
        resp = await http.put(f"{KEYS}/key-abc", json=key_body())
        assert resp.json()["propagation"] == "acked"
    acks = fc.router_acks()
    assert [(a.node_id, a.id, a.fmt) for a in acks] == [(node, "llama-4-chat", ack_fmt), (node, "key-abc", ack_fmt)]
    view = fc.router_view()
    assert view["acks"][0]["authority"] == AUTH


async def test_no_ack_is_deferred_and_acks_for_others_do_not_count(make_coordinator, channel) -> None:
    fc = make_coordinator(event_format="args", ack_timeout=1.0)
    async with client(fc) as http, RouterNodes(channel) as bus:
        await register_node(http, NODE_A)
        # Acks naming another id, kind or authority, and a malformed one.
        await bus.publish(ack_message("args", NODE_A, "key", "llama-4-chat"))
        await bus.publish(ack_message("args", NODE_A, "model", "other"))
        await bus.publish(ack_message("args", NODE_A, "model", "llama-4-chat", authority="elsewhere"))
        await bus.publish(ack_message("args", NODE_A, "policy", "llama-4-chat"))
        await eventually(lambda: len(fc.router_acks()) == 3 and fc.dropped())
        started = time.monotonic()
        resp = await http.put(f"{MODELS}/llama-4-chat", json=model_body())
        assert time.monotonic() - started >= 0.9
        assert resp.json() == {"success": True, "revision": 1, "propagation": "deferred", "acked_by": None}
        assert any("router ack" in d for d in fc.dropped())


async def test_suppressed_or_disabled_events_are_not_waited_for(make_coordinator, channel) -> None:
    fc = make_coordinator(ack_timeout=30.0)
    async with client(fc) as http, RouterNodes(channel) as bus:
        await http.post("/_test/suppress", json={"count": 1})
        started = time.monotonic()
        resp = await http.put(f"{KEYS}/key-abc", json=key_body())
        assert time.monotonic() - started < 20
        assert resp.json()["propagation"] == "deferred"
        [event] = fc.router_events()
        assert event.suppressed
        assert (await http.get("/_test/router")).json()["events"][0]["suppressed"] is True
    assert bus.raw == []
    off = make_coordinator(ack_timeout=30.0, emit_events=False)
    async with client(off) as http:
        resp = await http.delete(f"/v2/routers/{AUTH}/models/none", params={"strict": "true"})
        assert resp.json()["propagation"] == "none"
        await http.put(f"{MODELS}/m", json={})
        resp = await http.put(f"{MODELS}/m", json={})
        assert resp.json()["propagation"] == "deferred"
        assert off.router_events() == []


async def test_strict_delete_reports_the_nodes_that_did_not_ack(make_coordinator, channel) -> None:
    fc = make_coordinator(event_format="payload", ack_timeout=1.5)
    async with client(fc) as http:
        await register_node(http, NODE_A)
        await register_node(http, NODE_B)
        await http.put(f"{KEYS}/key-abc", json=key_body())
        await http.put(f"{KEYS}/key-def", json=key_body())
        async with RouterNodes(channel, ackers=(NODE_A,), fmt="payload"):
            started = time.monotonic()
            resp = await http.delete(f"{KEYS}/key-abc", params={"strict": "true"})
            assert time.monotonic() - started >= 1.4  # waited for B until the timeout
        assert resp.json() == {
            "success": True, "revision": 3, "propagation": "acked", "acked_by": NODE_A, "unconfirmed_nodes": [NODE_B],
        }  # fmt: skip
        async with RouterNodes(channel, ackers=(NODE_B, NODE_A), fmt="args"):
            resp = await http.delete(f"{KEYS}/key-def", params={"strict": "true"})
        body = resp.json()
        assert body["propagation"] == "acked" and body["acked_by"] == NODE_B
        assert body["unconfirmed_nodes"] == []


# -- circuits on a ROUTER worker ---------------------------------------------------------


async def test_circuits_are_placed_on_a_router_worker(make_coordinator, channel) -> None:
    fc = make_coordinator(event_format="args")
    endpoint_id = str(uuid.uuid4())
    async with client(fc) as http, Responder(channel, authority=AUTH):
        wid = await register_node(http)
        resp = await create(http, create_item(endpoint_id, service_name="llama"))
        assert resp.status_code == 200, resp.text
        assert resp.json()["endpoints"][0]["url"] == "https://router.example.com/"
        routes = {"endpoints": [{"deployment_id": endpoint_id, "routes": [route_entry(kernel_port=9001)]}]}
        assert (await http.post("/v2/endpoints/bulk/routes", json=routes)).status_code == 200
        [circuit] = (await http.get(f"/api/worker/{wid}/circuits")).json()["circuits"]
        assert circuit["frontend_mode"] == "router"
        assert circuit["port"] is None and circuit["subdomain"] is None
        assert circuit["endpoint_id"] == endpoint_id
        assert circuit["route_info"][0]["kernel_port"] == 9001
        assert (await http.get(f"/api/worker/{wid}")).json()["slots"] == []
        assert [a.circuit_ids for a in fc.acks()] == [[circuit["id"]]]


# -- the CLI -------------------------------------------------------------------------------


def run_cli(fc, *args: str, stdin: str | None = None, secret: str | None = API_SECRET) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "fakes.coordinator", *args, "--url", fc.url]
    env = {k: v for k, v in os.environ.items() if k != "APPPROXY_API_SECRET"}
    if secret is not None:
        env["APPPROXY_API_SECRET"] = secret
    return subprocess.run(cmd, cwd=ROOT, env=env, input=stdin, capture_output=True, text=True, timeout=120)


def test_cli_drives_router_mode(make_coordinator, openai_backends) -> None:
    fc = make_coordinator(ack_timeout=1.0)
    [backend] = openai_backends("b1")
    with httpx.Client(base_url=fc.url, headers=fc.headers) as http:
        wid = http.put("/api/worker", json=router_body()).json()["id"]

    out = run_cli(fc, "endpoint", "create", "--service-name", "llama", "--route", f"127.0.0.1:{backend.port}")
    assert out.returncode == 0, out.stderr
    created = json.loads(out.stdout)
    assert created["routes"][0]["kernel_port"] == backend.port
    endpoint_id = created["endpoint_id"]

    out = run_cli(fc, "router", "publish", "--authority", AUTH, "--model", "llama-4-chat", "--alias", "llama-4",
                  "--map", f"{endpoint_id}=0.7")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["revision"] == 1
    out = run_cli(fc, "router", "models", "--authority", AUTH)
    assert json.loads(out.stdout)["models"] == [
        {"model": "llama-4-chat", "aliases": ["llama-4"], "mappings": [{"endpoint_id": endpoint_id, "ratio": 0.7}],
         "control_mode": "manual"},
    ]  # fmt: skip

    key = "sk-demo-" + "x" * 32
    out = run_cli(fc, "router", "key", "put", "--authority", AUTH, "--key-id", "k1", "--key", key,
                  "--models", "llama-4-chat,llama-4", "--rate-limit", "60", "--expires", "2030-01-01T00:00:00Z")  # fmt: skip
    assert out.returncode == 0, out.stderr
    digest = hashlib.sha256(key.encode()).hexdigest()
    assert key not in out.stdout + out.stderr and digest not in out.stdout + out.stderr
    out = run_cli(fc, "router", "key", "put", "--authority", AUTH, "--key-id", "k2", "--key-stdin", stdin=key + "2\n")
    assert out.returncode == 0, out.stderr
    out = run_cli(fc, "router", "keys", "--authority", AUTH)
    listed = json.loads(out.stdout)["api_keys"]
    assert [k["key_id"] for k in listed] == ["k1", "k2"]
    assert listed[0]["display_hint"] == "…xxxx" and listed[0]["rate_limit"] == 60
    assert listed[0]["allowed_models"] == ["llama-4-chat", "llama-4"]

    with httpx.Client(base_url=fc.url, headers=fc.headers) as http:
        snap = http.get(f"/api/worker/{wid}/router-config").json()
    assert {k["key_id"]: k["token_hash"] for k in snap["api_keys"]}["k1"] == digest

    out = run_cli(fc, "router", "key", "delete", "--authority", AUTH, "--key-id", "k1", "--strict")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["unconfirmed_nodes"] == [NODE_A]
    out = run_cli(fc, "router", "unpublish", "--authority", AUTH, "--model", "llama-4-chat")
    assert out.returncode == 0 and json.loads(out.stdout)["revision"] == 5

    # Errors: a validation error is exit 1, no secret is exit 2.
    out = run_cli(fc, "router", "publish", "--authority", AUTH, "--model", "k", "--alias", "k")
    assert out.returncode == 1 and "400" in out.stderr
    out = run_cli(fc, "router", "models", "--authority", AUTH, secret=None)
    assert out.returncode == 2
    out = run_cli(fc, "endpoint", "delete", "--endpoint-id", endpoint_id)
    assert out.returncode == 0 and fc.circuits() == []
