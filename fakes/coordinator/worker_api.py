"""The worker API (reference §1): ``/api/worker…`` and ``/api/circuit/{id}``.

Invariants:
- A worker is keyed by its authority: re-registering (PUT) keeps its id,
  bumps ``nodes``, makes it ALIVE and never changes ``accepted_traffics``;
  app filters are only ever added.
- Only PATCH (the heartbeat) records ``last_seen``, and revives a LOST worker.
- DELETE drops one node; the worker is LOST when none is left. Workers are
  never forgotten.
- An unknown worker or circuit id is 404 ``E00002: No such worker.`` /
  ``… circuit.``; ids match in any case.
- ROUTER (BEP-1053): the slot fields must be null and ``node_id`` is
  required; every node of an authority shares its worker id. Register and
  PATCH refresh that node (``node_id`` in the JSON body or the query), DELETE
  drops only that node, and responses carry ``nodes: [{node_id, last_seen}]``
  of the live ones (no slots). A coordinator never hosts a ROUTER worker and a
  stock inference worker together (400 either way round).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from .bodies import NodeBody, WorkerRequest, json_response, load_json, parse, validate
from .errors import invalid, not_found
from .state import CONFIG_KEY, STATE_KEY, CoordinatorState, Deregistration, check_router_workers, now_iso

log = logging.getLogger(__name__)


def worker_response(state: CoordinatorState, row: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in row.items() if k not in ("app_filters", "status")}
    circuits = state.worker_circuits(row["id"])
    if row["frontend_mode"] == "router":
        out["nodes"] = state.router.of(row["authority"]).nodes_view()
        out["slots"] = []
        return out
    if row["frontend_mode"] == "port" and row["port_range"]:
        taken = {c["port"]: c["id"] for c in circuits if c["port"]}
        lo, hi = row["port_range"]
        slots = [
            {
                "frontend_mode": "port",
                "in_use": p in taken,
                "port": p,
                "subdomain": None,
                "circuit_id": taken.get(p),
            }
            for p in range(lo, hi + 1)
        ]
    else:
        slots = [
            {
                "frontend_mode": "wildcard",
                "in_use": True,
                "port": None,
                "subdomain": c["subdomain"],
                "circuit_id": c["id"],
            }
            for c in circuits
        ]
    out["slots"] = slots
    return out


def _worker_or_404(state: CoordinatorState, request: web.Request) -> dict[str, Any]:
    row = state.workers.get(request.match_info["worker_id"].lower())
    if row is None:
        raise not_found("worker")
    return row


def _check_router_request(state: CoordinatorState, params: WorkerRequest) -> None:
    """400 for a ROUTER body with slot fields or no node_id, or a colocation."""
    router = params.frontend_mode == "router"
    if router:
        if (
            params.port_range is not None
            or params.wildcard_domain is not None
            or params.wildcard_traffic_port is not None
        ):
            raise invalid("port_range, wildcard_domain and wildcard_traffic_port must be null for ROUTER frontend mode")
        if not params.node_id:
            raise invalid("node_id is required for ROUTER frontend mode")
    existing = state.worker_by_authority(params.authority)
    if existing is not None and (existing["frontend_mode"] == "router") != router:
        raise invalid(f"authority {params.authority} is registered in {existing['frontend_mode']} frontend mode")
    if not router and "inference" not in params.accepted_traffics:
        return
    for w in state.workers.values():
        if w["authority"] == params.authority:
            continue
        if router and w["frontend_mode"] != "router" and "inference" in w["accepted_traffics"]:
            raise invalid("this coordinator hosts a stock inference worker; a ROUTER worker needs its own coordinator")
        if not router and w["frontend_mode"] == "router":
            raise invalid("this coordinator hosts a ROUTER worker; a stock inference worker needs another coordinator")


async def _node_id(request: web.Request) -> str | None:
    node = request.query.get("node_id")
    if node:
        return node
    return validate(NodeBody, await load_json(request)).node_id


async def put_worker(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    params = await parse(request, WorkerRequest)
    if params.frontend_mode == "wildcard" and not params.wildcard_domain:
        raise invalid("Wildcard domain is required for WILDCARD_DOMAIN frontend mode")
    if params.frontend_mode == "port" and not params.port_range:
        raise invalid("Port range is required for PORT frontend mode")
    slots = (
        -1
        if params.frontend_mode in ("wildcard", "router")
        else (params.port_range[1] - params.port_range[0] + 1 if params.port_range else 0)
    )
    fields = {
        "authority": params.authority,
        "frontend_mode": params.frontend_mode,
        "protocol": params.protocol,
        "hostname": params.hostname,
        "tls_listen": params.tls_listen,
        "tls_advertised": params.tls_advertised,
        "api_port": params.api_port,
        "port_range": list(params.port_range) if params.port_range else None,
        "wildcard_domain": params.wildcard_domain,
        "wildcard_traffic_port": params.wildcard_traffic_port,
        "filtered_apps_only": params.filtered_apps_only,
        "traefik_last_used_marker_path": params.traefik_last_used_marker_path,
    }
    router = params.frontend_mode == "router"
    if router:  # traffic_port 0 or absent means api_port
        fields["traffic_port"] = params.traffic_port or params.api_port
    with state.lock:
        _check_router_request(state, params)
        row = state.worker_by_authority(params.authority)
        if router and params.node_id:
            state.router.of(params.authority).touch(params.node_id)
        if row is not None:
            row.update(fields)  # accepted_traffics is never updated (§1.3)
            row["available_slots"] = slots
            row["updated_at"] = now_iso()
            if not router:
                row["nodes"] += 1
            row["status"] = "ALIVE"
        else:
            now = now_iso()
            row = {
                **fields,
                "accepted_traffics": list(params.accepted_traffics),
                "id": str(uuid.uuid4()),
                "created_at": now,
                "updated_at": now,
                "available_slots": slots,
                "occupied_slots": 0,
                "nodes": 1,
                "status": "ALIVE",
                "app_filters": [],
            }
            if router:
                del row["nodes"]  # per node: state.router
            state.workers[row["id"]] = row
        for f in params.app_filters:  # only ever added
            if f.model_dump() not in row["app_filters"]:
                row["app_filters"].append(f.model_dump())
        body = worker_response(state, row)
    return json_response(body)


async def list_workers(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    with state.lock:
        check_router_workers(state, request.app[CONFIG_KEY].heartbeat_timeout)
        return json_response({"workers": [worker_response(state, w) for w in state.workers.values()]})


async def get_worker(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    with state.lock:
        check_router_workers(state, request.app[CONFIG_KEY].heartbeat_timeout)
        return json_response(worker_response(state, _worker_or_404(state, request)))


async def heartbeat_worker(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    with state.lock:
        row = _worker_or_404(state, request)
        router = row["frontend_mode"] == "router"
    node_id = await _node_id(request) if router else None
    if router and not node_id:
        raise invalid("node_id is required to heartbeat a ROUTER worker")
    with state.lock:
        if row["status"] != "ALIVE":
            log.info("fake coordinator: worker %s revived by heartbeat", row["authority"])
        row["status"] = "ALIVE"
        row["updated_at"] = now_iso()
        if node_id:
            state.router.of(row["authority"]).touch(node_id)
        else:
            state.last_seen[row["authority"]] = time.monotonic()
        return json_response(worker_response(state, row))


async def delete_worker(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    with state.lock:
        row = _worker_or_404(state, request)
        router = row["frontend_mode"] == "router"
    if router:
        node_id = await _node_id(request)
        if not node_id:
            raise invalid("node_id is required to deregister a ROUTER node")
        with state.lock:
            nodes = state.router.of(row["authority"]).nodes
            nodes.pop(node_id, None)
            if not nodes:
                row["status"] = "LOST"
            state.deregistrations.append(Deregistration(row["authority"], node_id))
        return json_response({"success": True})
    with state.lock:
        row["nodes"] -= 1
        if row["nodes"] <= 0:
            row["status"] = "LOST"
        state.deregistrations.append(Deregistration(row["authority"], None))
    return json_response({"success": True})


async def list_worker_circuits(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    with state.lock:
        row = _worker_or_404(state, request)
        return json_response({"circuits": state.worker_circuits(row["id"])})


async def get_circuit(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    with state.lock:
        circuit = state.circuits.get(request.match_info["circuit_id"].lower())
        if circuit is None:
            raise not_found("circuit")
        return json_response(circuit)


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_put("/api/worker", put_worker)
    router.add_get("/api/worker", list_workers)
    router.add_get("/api/worker/{worker_id}", get_worker)
    router.add_patch("/api/worker/{worker_id}", heartbeat_worker)
    router.add_delete("/api/worker/{worker_id}", delete_worker)
    router.add_get("/api/worker/{worker_id}/circuits", list_worker_circuits)
    router.add_get("/api/circuit/{circuit_id}", get_circuit)
