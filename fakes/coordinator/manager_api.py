"""The manager API (reference §6): ``/v2/endpoints…``.

Invariants:
- A create chooses a worker for every new item, commits them all, and only
  then initialises each new circuit in turn: publish ``created`` and wait
  ``ack_timeout`` for an ack naming it, else 503 ``E10001: Proxy worker not
  responding`` with the row kept. A suppressed or disabled ``created`` is not
  waited for.
- Re-sending a create for an endpoint that has a circuit is 200 with its URL,
  updates only the health check, and publishes nothing.
- Deleting an unknown endpoint succeeds; each worker that lost circuits gets
  one ``removed`` event listing them.
- Route changes (replace / register / unregister) publish ``route_updated``
  with the circuit's full route list; stored routes have ratio 1.0 and
  protocol http. An endpoint without a circuit fails only its own item.
- Tokens are HS256 JWTs signed with ``jwt_secret``: the circuit without its
  routes, plus ``app_url``, ``user`` and ``exp``.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

import jwt
from aiohttp import web

from appproxy.envelope import CREATED, REMOVED

from .bodies import (
    BulkCreate,
    BulkDelete,
    BulkRoutes,
    BulkUnregister,
    CreateItem,
    CreateSingle,
    HealthCheck,
    Model,
    RouteEntry,
    TokenRequest,
    json_response,
    parse,
)
from .errors import invalid, not_found, worker_not_responding
from .events import publish, publish_route_update
from .placement import endpoint_url, match_existing, new_circuit, pick_worker
from .state import CONFIG_KEY, RUNTIME_KEY, STATE_KEY, CoordinatorState, now_iso

RouteOp = Callable[[list[dict[str, Any]], Any], list[dict[str, Any]]]


def circuit_for_endpoint(state: CoordinatorState, endpoint_id: str) -> dict[str, Any]:
    circuit = state.endpoint_circuit(endpoint_id)
    if circuit is None:
        raise not_found("inference-circuit")
    return circuit


# -- create -------------------------------------------------------------------


async def _initialize(app: web.Application, circuit: dict[str, Any], authority: str) -> None:
    """Broadcast ``created`` and wait for an ack naming the circuit (§4)."""
    pending: dict[str, asyncio.Future[None]] = app[RUNTIME_KEY]["pending"]
    cid = circuit["id"]
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    pending[cid] = future  # registered before publishing: no lost ack
    try:
        if not await publish(app, CREATED, authority, circuits=[copy.deepcopy(circuit)]):
            return
        try:
            await asyncio.wait_for(asyncio.shield(future), app[CONFIG_KEY].ack_timeout)
        except TimeoutError:
            raise worker_not_responding(authority) from None
    finally:
        pending.pop(cid, None)


async def _sync_endpoints(
    app: web.Application, items: list[tuple[UUID, CreateItem | CreateSingle]]
) -> list[dict[str, Any]]:
    """Commit every item first, then initialise the new circuits one by one."""
    state = app[STATE_KEY]
    results: list[dict[str, Any]] = []
    fresh: list[tuple[dict[str, Any], str]] = []
    with state.lock:
        staged: list[tuple[UUID, Any, dict[str, Any] | None, dict]] = []
        for endpoint_id, item in items:
            if state.endpoint_circuit(str(endpoint_id)) is not None:
                staged.append((endpoint_id, item, None, {}))
                continue
            worker: dict[str, Any] | None = None
            preferred: dict[str, Any] = {}
            if item.tags.endpoint.existing_url:
                worker, preferred = match_existing(state, item.tags.endpoint.existing_url)
            if worker is None:
                worker = pick_worker(state)
            staged.append((endpoint_id, item, worker, preferred))
        # Nothing failed above: commit.
        for endpoint_id, item, worker, preferred in staged:
            key = str(endpoint_id)
            hc = item.health_check
            if worker is None:
                ep = state.endpoints[key]
                ep.update(health_check_enabled=hc is not None, health_check=hc)
                circuit = state.circuits[ep["circuit_id"]]
                wrow = state.workers[circuit["worker"]]
            else:
                circuit = new_circuit(state, item, endpoint_id, preferred, worker)
                state.circuits[circuit["id"]] = circuit
                state.endpoints[key] = {
                    "circuit_id": circuit["id"],
                    "health_check_enabled": hc is not None,
                    "health_check": hc,
                }
                worker["occupied_slots"] += 1
                wrow = worker
                fresh.append((copy.deepcopy(circuit), worker["authority"]))
            results.append(
                {
                    "deployment_id": key,
                    "url": endpoint_url(circuit, wrow),
                    "health_check_enabled": hc is not None,
                }
            )
    for circuit, authority in fresh:
        await _initialize(app, circuit, authority)
    return results


async def create_bulk(request: web.Request) -> web.Response:
    params = await parse(request, BulkCreate)
    results = await _sync_endpoints(request.app, [(item.deployment_id, item) for item in params.endpoints])
    return json_response({"endpoints": results})


async def create_single(request: web.Request) -> web.Response:
    try:
        endpoint_id = UUID(request.match_info["endpoint_id"])
    except ValueError:
        raise invalid("endpoint_id must be a UUID") from None
    params = await parse(request, CreateSingle)
    [result] = await _sync_endpoints(request.app, [(endpoint_id, params)])
    return json_response(
        {
            "success": True,
            "endpoint": result["url"],
            "health_check_enabled": result["health_check_enabled"],
        }
    )


# -- delete -------------------------------------------------------------------


async def _remove(app: web.Application, endpoint_ids: list[str]) -> None:
    state = app[STATE_KEY]
    by_worker: dict[str, list[dict[str, Any]]] = {}
    with state.lock:
        for key in endpoint_ids:
            ep = state.endpoints.pop(key.lower(), None)
            if ep is None:
                continue  # already gone counts as success
            circuit = state.circuits.pop(ep["circuit_id"], None)
            if circuit is None:
                continue
            worker = state.workers.get(circuit["worker"])
            if worker is not None:
                worker["occupied_slots"] -= 1
                by_worker.setdefault(worker["authority"], []).append(circuit)
    for authority, circuits in by_worker.items():
        await publish(app, REMOVED, authority, circuits=circuits)


async def delete_single(request: web.Request) -> web.Response:
    await _remove(request.app, [request.match_info["endpoint_id"]])
    return json_response({"success": True})


async def delete_bulk(request: web.Request) -> web.Response:
    params = await parse(request, BulkDelete)
    ids = [str(item.deployment_id) for item in params.endpoints]
    await _remove(request.app, ids)
    return json_response({"endpoints": [{"deployment_id": i, "success": True, "error": None} for i in ids]})


# -- routes -------------------------------------------------------------------


def _route_row(entry: RouteEntry) -> dict[str, Any]:
    row = {
        "route_id": str(entry.route_id),
        "session_id": str(entry.session_id),
        "session_name": None,
        "kernel_host": entry.kernel_host,
        "kernel_port": entry.kernel_port,
        "protocol": "http",
        "traffic_ratio": entry.traffic_ratio,
    }
    if entry.replica_group_id is not None:  # the refined shape only when asked for
        row["replica_group_id"] = entry.replica_group_id
    return row


def _replace(_old: list[dict[str, Any]], routes: list[RouteEntry]) -> list[dict[str, Any]]:
    return [_route_row(r) for r in routes]


def _register(old: list[dict[str, Any]], routes: list[RouteEntry]) -> list[dict[str, Any]]:
    have = {r.get("route_id") for r in old}
    return old + [_route_row(r) for r in routes if str(r.route_id) not in have]


def _unregister(old: list[dict[str, Any]], route_ids: list[UUID]) -> list[dict[str, Any]]:
    drop = {str(r) for r in route_ids}
    return [r for r in old if r.get("route_id") not in drop]


async def _change_routes(
    app: web.Application, items: list[tuple[UUID, Any]], op: RouteOp, groups: list[Any] | None = None
) -> list[dict[str, Any]]:
    """`groups`: per item, its ``replica_groups`` (None: the circuit keeps its own)."""
    state = app[STATE_KEY]
    results: list[dict[str, Any]] = []
    changed: list[dict[str, Any]] = []
    with state.lock:
        for n, (endpoint_id, arg) in enumerate(items):
            key = str(endpoint_id)
            circuit = state.endpoint_circuit(key)
            if circuit is None:
                results.append(
                    {
                        "deployment_id": key,
                        "success": False,
                        "error": f"No circuit registered for endpoint {key}",
                    }
                )
                continue
            circuit["route_info"] = op(circuit["route_info"], arg)
            if groups is not None and groups[n] is not None:
                circuit["replica_groups"] = [g.model_dump() for g in groups[n]]
            circuit["updated_at"] = now_iso()
            changed.append(copy.deepcopy(circuit))
            results.append({"deployment_id": key, "success": True, "error": None})
    for circuit in changed:
        await publish_route_update(app, circuit)
    return results


def _routes_handler(
    body: type[Model], arg: Callable[[Any], Any], op: RouteOp
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A bulk route endpoint: ``op(routes, arg(item))`` on each item's circuit."""

    async def handler(request: web.Request) -> web.Response:
        params: Any = await parse(request, body)
        items = [(i.deployment_id, arg(i)) for i in params.endpoints]
        groups = [getattr(i, "replica_groups", None) for i in params.endpoints]
        return json_response({"endpoints": await _change_routes(request.app, items, op, groups)})

    return handler


routes_replace = _routes_handler(BulkRoutes, lambda i: i.routes, _replace)
routes_register = _routes_handler(BulkRoutes, lambda i: i.routes, _register)
routes_unregister = _routes_handler(BulkUnregister, lambda i: i.route_ids, _unregister)


# -- health check and token ----------------------------------------------------


async def put_health_check(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    params = await parse(request, HealthCheck)
    with state.lock:
        circuit_for_endpoint(state, request.match_info["endpoint_id"])
        ep = state.endpoints[request.match_info["endpoint_id"].lower()]
        ep.update(
            health_check_enabled=params.health_check is not None,
            health_check=params.health_check,
        )
    return json_response({"success": True})


async def mint_token(request: web.Request) -> web.Response:
    state, cfg = request.app[STATE_KEY], request.app[CONFIG_KEY]
    params = await parse(request, TokenRequest)
    with state.lock:
        circuit = circuit_for_endpoint(state, request.match_info["endpoint_id"])
        worker = state.workers[circuit["worker"]]
        payload: dict[str, Any] = {k: v for k, v in circuit.items() if k != "route_info"}
        payload["app_url"] = endpoint_url(circuit, worker)
    payload["user"] = str(params.user_uuid)
    payload["exp"] = params.exp
    token = jwt.encode(payload, cfg.jwt_secret, algorithm="HS256")
    return json_response({"token": token})


def add_routes(router: web.UrlDispatcher) -> None:
    # Plain paths before the {endpoint_id} patterns they would also match.
    router.add_post("/v2/endpoints/bulk", create_bulk)
    router.add_delete("/v2/endpoints/bulk", delete_bulk)
    router.add_post("/v2/endpoints/bulk/routes", routes_replace)
    router.add_post("/v2/endpoints/bulk/routes/register", routes_register)
    router.add_post("/v2/endpoints/bulk/routes/unregister", routes_unregister)
    router.add_post("/v2/endpoints/{endpoint_id}", create_single)
    router.add_delete("/v2/endpoints/{endpoint_id}", delete_single)
    router.add_put("/v2/endpoints/{endpoint_id}/health-check", put_health_check)
    router.add_post("/v2/endpoints/{endpoint_id}/token", mint_token)
