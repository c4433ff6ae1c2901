"""A fake Backend.AI AppProxy coordinator for tests and local runs.

It behaves like the reference (``shared/reference/appproxy-protocol.md``) on
the parts a wildcard inference worker and the manager touch:

- auth (§1.2): ``X-BackendAI-Token`` equal to ``<api_secret>``, ``Bearer …`` or
  ``BackendAI …``; else ``Authorization: Bearer <jwt signed HS256 with
  api_secret>``; anything else is 401 AuthorizationFailed (§1.5 body);
- worker API (§1): PUT/PATCH/DELETE/GET ``/api/worker…`` and
  ``GET /api/worker/{id}/circuits``, snake_case bodies, re-register keeps the
  id, bumps ``nodes`` and never changes ``accepted_traffics``; unknown worker
  is 404 ``E00002: No such worker.``;
- manager API (§6): bulk create (commit first, then per new circuit: publish
  ``created`` and wait ``ack_timeout`` for an ack naming it, else 503
  ``E10001: Proxy worker not responding`` with the row kept; a re-send is 200
  with no new event), delete (removed event), bulk routes replace / register
  / unregister (route_updated with the full list; ratio 1.0, protocol http),
  health-check, token (HS256 with jwt_secret);
- events (§3) on the Pub/Sub channel in one configured format; acks in the
  other format, or whose circuits are not complete SerializableCircuits, are
  dropped like the real parser does;
- heartbeat (§7.1): only PATCH records ``last_seen``; a worker ALIVE with a
  ``last_seen`` older than ``heartbeat_timeout`` becomes LOST at the next
  check and gets no new circuits; the next PATCH revives it.

Test-only knobs (also over HTTP under ``/_test/``): change a route's
traffic_ratio without an event, suppress the next N events (a suppressed
``created`` is not waited for), inspect workers/circuits/events/acks.

Not modelled: Traefik mode, app filters in worker choice, interactive
circuits, ``/v2/conf``, the anycast stream.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import hmac
import logging
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Self, TypeVar
from urllib.parse import urlsplit
from uuid import UUID

import jwt
import orjson
import redis.asyncio as aioredis
from aiohttp import web
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
)

from . import envelope
from .envelope import (
    ACK,
    CHANNEL,
    CREATED,
    REMOVED,
    ROUTE_UPDATED,
    EnvelopeError,
    Format,
)

log = logging.getLogger(__name__)

__all__ = ["CONFIG_KEY", "STATE_KEY", "CoordinatorState", "FakeCoordinator", "make_app"]

PROBS = "https://api.backend.ai/probs/"
Protocol = Literal["http", "grpc", "h2", "tcp", "preopen", "vnc", "rdp"]


# -- errors (§1.5) ----------------------------------------------------------


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        type_: str,
        title: str,
        error_code: str,
        msg: str | None = None,
        data: Any = None,
    ) -> None:
        super().__init__(msg or title)
        self.status = status
        self.body: dict[str, Any] = {
            "type": type_,
            "title": title,
            "error_code": error_code,
        }
        if msg is not None:
            self.body["msg"] = msg
        if data is not None:
            self.body["data"] = data


def _auth_failed(msg: str = "Unauthorized access") -> ApiError:
    return ApiError(
        401,
        PROBS + "auth-failed",
        "Credential/signature mismatch.",
        "agent_auth_unauthorized",
        msg,
    )


def _not_found(what: str) -> ApiError:
    return ApiError(
        404,
        PROBS + "object-not-found",
        f"E00002: No such {what}.",
        "agent_read_not-found",
    )


def _invalid(msg: str, errors: Any = None) -> ApiError:
    return ApiError(
        400,
        PROBS + "invalid-api-params",
        "Missing or invalid API parameters.",
        "agent_request_invalid-parameters",
        msg,
        {"errors": errors} if errors is not None else None,
    )


def _worker_not_responding(authority: str) -> ApiError:
    return ApiError(
        503,
        PROBS + "service-unavailable",
        "Service unavailable.",
        "agent_generic_unavailable",
        "E10001: Proxy worker not responding",
        {"worker": authority},
    )


def _worker_not_available() -> ApiError:
    return ApiError(
        503,
        PROBS + "appproxy/worker-not-available",
        "Worker not available.",
        "agent_access_not-found",
    )


# -- request models ---------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _AppFilter(_Model):
    key: str
    value: str


class _WorkerRequest(_Model):
    authority: str
    frontend_mode: Literal["wildcard", "port"]
    protocol: Protocol
    hostname: str
    tls_listen: bool
    tls_advertised: bool
    api_port: int
    port_range: tuple[int, int] | None = None
    wildcard_domain: str | None = None
    wildcard_traffic_port: int | None = None
    filtered_apps_only: bool
    traefik_last_used_marker_path: str | None = None
    accepted_traffics: list[Literal["interactive", "inference"]]
    app_filters: list[_AppFilter] = Field(default_factory=list)


class _SessionTags(_Model):
    id: UUID | None = None
    user_uuid: UUID
    project_id: UUID = Field(validation_alias=AliasChoices("project_id", "group_id"))
    access_key: str | None = None
    domain_name: str


class _EndpointTags(_Model):
    id: UUID
    runtime_variant: str | None = None
    existing_url: str | None = None


class _Tags(_Model):
    session: _SessionTags
    endpoint: _EndpointTags


class _CreateItem(_Model):
    deployment_id: UUID = Field(validation_alias=AliasChoices("deployment_id", "endpoint_id"))
    version: str = "v2"
    service_name: str
    tags: _Tags
    open_to_public: bool = False
    health_check: dict[str, Any] | None = None


class _CreateSingle(_Model):
    version: str = "v2"
    service_name: str
    tags: _Tags
    open_to_public: bool = False
    port: int | None = None
    subdomain: str | None = None
    health_check: dict[str, Any] | None = None


class _BulkCreate(_Model):
    endpoints: list[_CreateItem]


class _DeleteItem(_Model):
    deployment_id: UUID = Field(validation_alias=AliasChoices("deployment_id", "endpoint_id"))


class _BulkDelete(_Model):
    endpoints: list[_DeleteItem]


class _RouteEntry(_Model):
    session_id: UUID
    route_id: UUID
    kernel_host: str
    kernel_port: int


class _RoutesItem(_Model):
    deployment_id: UUID = Field(validation_alias=AliasChoices("deployment_id", "endpoint_id"))
    routes: list[_RouteEntry]


class _BulkRoutes(_Model):
    endpoints: list[_RoutesItem]


class _UnregisterItem(_Model):
    deployment_id: UUID = Field(validation_alias=AliasChoices("deployment_id", "endpoint_id"))
    route_ids: list[UUID]


class _BulkUnregister(_Model):
    endpoints: list[_UnregisterItem]


class _HealthCheck(_Model):
    health_check: dict[str, Any] | None = None


class _TokenRequest(_Model):
    user_uuid: UUID
    exp: datetime


# What the real coordinator's ack parser demands: every required field of a
# SerializableCircuit (reference §2.1), or the whole ack is dropped.
class _StrictRoute(_Model):
    route_id: UUID | None = Field(default=None, validation_alias=AliasChoices("route-id", "route_id"))
    session_id: UUID = Field(validation_alias=AliasChoices("session-id", "session_id"))
    session_name: str | None = Field(default=None, validation_alias=AliasChoices("session-name", "session_name"))
    kernel_host: str | None = Field(validation_alias=AliasChoices("kernel-host", "kernel_host"))
    kernel_port: int = Field(ge=1, le=65535, validation_alias=AliasChoices("kernel-port", "kernel_port"))
    protocol: Protocol
    traffic_ratio: float = 1.0


class _StrictCircuit(_Model):
    id: UUID
    app: str
    protocol: Protocol
    worker: UUID
    app_mode: Literal["interactive", "inference"]
    frontend_mode: Literal["wildcard", "port"]
    envs: dict[str, Any]
    arguments: str | None
    open_to_public: bool
    allowed_client_ips: str | None = None
    port: int | None = None
    subdomain: str | None = None
    user_id: UUID | None = None
    endpoint_id: UUID | None = None
    runtime_variant: str | None = None
    route_info: list[_StrictRoute]
    session_ids: list[UUID]
    created_at: datetime
    updated_at: datetime


# -- state ------------------------------------------------------------------


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass
class PublishedEvent:
    name: str
    fmt: Format
    authority: str
    circuit_ids: list[str]
    data: bytes
    suppressed: bool = False
    at: float = field(default_factory=time.monotonic)


@dataclass
class ReceivedAck:
    authority: str | None
    circuit_ids: list[str]
    fmt: Format
    source: str | None
    data: bytes
    at: float = field(default_factory=time.monotonic)


@dataclass
class CoordinatorState:
    """Everything the fake remembers; survives a restart of the HTTP server.

    Mutated on the server's event loop under ``lock``; read from any thread
    through ``FakeCoordinator`` helpers, which copy under the lock.
    """

    lock: threading.RLock = field(default_factory=threading.RLock)
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)  # id → row
    last_seen: dict[str, float] = field(default_factory=dict)  # authority → monotonic
    circuits: dict[str, dict[str, Any]] = field(default_factory=dict)  # id → circuit
    endpoints: dict[str, dict[str, Any]] = field(default_factory=dict)  # id → row
    events: list[PublishedEvent] = field(default_factory=list)
    acks: list[ReceivedAck] = field(default_factory=list)
    dropped: list[tuple[str, bytes]] = field(default_factory=list)  # (reason, data)
    suppress: int = 0

    def worker_by_authority(self, authority: str) -> dict[str, Any] | None:
        return next((w for w in self.workers.values() if w["authority"] == authority), None)

    def worker_circuits(self, worker_id: str) -> list[dict[str, Any]]:
        return [c for c in self.circuits.values() if c["worker"] == worker_id]


@dataclass(frozen=True)
class FakeConfig:
    api_secret: str = field(repr=False)
    jwt_secret: str = field(repr=False)
    redis_url: str
    event_format: Format = "payload"
    ack_timeout: float = 15.0
    heartbeat_timeout: float = 30.0
    lost_check_interval: float = 15.0
    emit_events: bool = True
    channel: str = CHANNEL


STATE_KEY = web.AppKey("fake_coordinator.state", CoordinatorState)
CONFIG_KEY = web.AppKey("fake_coordinator.config", FakeConfig)
_RUNTIME_KEY = web.AppKey("fake_coordinator.runtime", dict)


# -- helpers ----------------------------------------------------------------


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


M = TypeVar("M", bound=BaseModel)


async def _parse(request: web.Request, model: type[M]) -> M:
    raw = await request.read()
    try:
        data = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError:
        raise _invalid("Malformed body") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        raise _invalid("Input validation error", errors) from exc


def _check_auth(request: web.Request, api_secret: str) -> None:
    token = request.headers.get("X-BackendAI-Token")
    if token:
        permitted = (api_secret, f"Bearer {api_secret}", f"BackendAI {api_secret}")
        if not any(hmac.compare_digest(token.encode(), p.encode()) for p in permitted):
            raise _auth_failed()
        return
    header = request.headers.get("Authorization")
    if not header:
        raise _auth_failed()
    method, _, value = header.partition(" ")
    if method.lower() != "bearer":
        raise _auth_failed(f"Unsupported authorization method {method}")
    try:
        jwt.decode(value, api_secret, algorithms=["HS256"])
    except jwt.PyJWTError:
        raise _auth_failed() from None


def _worker_response(state: CoordinatorState, row: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in row.items() if k not in ("app_filters", "status")}
    circuits = state.worker_circuits(row["id"])
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


def _endpoint_url(circuit: Mapping[str, Any], worker: Mapping[str, Any]) -> str:
    tls = worker["tls_listen"] or worker["tls_advertised"]
    scheme = "https" if tls else "http"
    if circuit["frontend_mode"] == "port":
        return f"{scheme}://{worker['hostname']}:{circuit['port']}/"
    port = worker["wildcard_traffic_port"]
    suffix = "" if port is None or (tls and port == 443) or (not tls and port == 80) else f":{port}"
    return f"{scheme}://{circuit['subdomain']}{worker['wildcard_domain']}{suffix}/"


def _pick_worker(state: CoordinatorState) -> dict[str, Any]:
    candidates = [
        w
        for w in state.workers.values()
        if w["status"] == "ALIVE"
        and w["protocol"] == "http"
        and "inference" in w["accepted_traffics"]
        and (w["frontend_mode"] == "wildcard" or w["available_slots"] - w["occupied_slots"] > 0)
    ]
    if not candidates:
        raise _worker_not_available()
    # Wildcard workers first, then the port worker with the most free slots.
    candidates.sort(
        key=lambda w: (0, 0) if w["frontend_mode"] == "wildcard" else (1, -(w["available_slots"] - w["occupied_slots"]))
    )
    return candidates[0]


def _match_existing(state: CoordinatorState, url: str) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not host:
        raise _invalid("URL is missing host component.")
    label, _, rest = host.partition(".")
    for w in state.workers.values():
        if (
            "inference" in w["accepted_traffics"]
            and w["frontend_mode"] == "wildcard"
            and w["wildcard_domain"] == "." + rest
        ):
            return w, {"subdomain": label}
    for w in state.workers.values():
        if (
            "inference" in w["accepted_traffics"]
            and w["frontend_mode"] == "port"
            and w["hostname"] == host
            and parts.port
            and w["port_range"]
            and w["port_range"][0] <= parts.port <= w["port_range"][1]
        ):
            return w, {"port": parts.port}
    return None, {}


def _new_circuit(
    state: CoordinatorState,
    item: _CreateItem | _CreateSingle,
    endpoint_id: UUID,
    preferred: Mapping[str, Any],
    worker: dict[str, Any],
) -> dict[str, Any]:
    taken = state.worker_circuits(worker["id"])
    subdomain: str | None = None
    port: int | None = None
    if worker["frontend_mode"] == "wildcard":
        wanted = preferred.get("subdomain") or item.service_name
        used = {c["subdomain"] for c in taken}
        subdomain = wanted
        while subdomain in used:
            subdomain = f"{wanted}-{uuid.uuid4().hex[:8]}"
    else:
        lo, hi = worker["port_range"]
        free = sorted(set(range(lo, hi + 1)) - {c["port"] for c in taken})
        want = preferred.get("port")
        if (want is not None and want not in free) or not free:
            raise ApiError(
                409,
                PROBS + "appproxy/port-not-available",
                "Designated port already occupied.",
                "agent_setup_already-exists",
            )
        port = want if want is not None else free[0]
    now = _now_iso()
    return {
        "id": str(uuid.uuid4()),
        "app": item.service_name,
        "protocol": "http",
        "worker": worker["id"],
        "app_mode": "inference",
        "frontend_mode": worker["frontend_mode"],
        "envs": {},
        "arguments": None,
        "open_to_public": item.open_to_public,
        "allowed_client_ips": None,
        "port": port,
        "subdomain": subdomain,
        "user_id": str(item.tags.session.user_uuid),
        "endpoint_id": str(endpoint_id),
        "runtime_variant": item.tags.endpoint.runtime_variant,
        "route_info": [],
        "session_ids": [],
        "created_at": now,
        "updated_at": now,
    }


def _route_row(entry: _RouteEntry) -> dict[str, Any]:
    return {
        "route_id": str(entry.route_id),
        "session_id": str(entry.session_id),
        "session_name": None,
        "kernel_host": entry.kernel_host,
        "kernel_port": entry.kernel_port,
        "protocol": "http",
        "traffic_ratio": 1.0,
    }


# -- events -----------------------------------------------------------------


async def _publish(
    app: web.Application,
    name: str,
    authority: str,
    *,
    circuits: list[dict[str, Any]] | None = None,
    circuit: dict[str, Any] | None = None,
    routes: list[dict[str, Any]] | None = None,
) -> bool:
    """Publish one event; False when events are off or this one is suppressed."""
    cfg, state = app[CONFIG_KEY], app[STATE_KEY]
    if not cfg.emit_events:
        return False
    data = envelope.encode_event(
        name,
        cfg.event_format,
        authority=authority,
        circuits=circuits,
        circuit=circuit,
        routes=routes,
    )
    ids = [c["id"] for c in (circuits if circuits is not None else [circuit or {}])]
    with state.lock:
        suppressed = state.suppress > 0
        if suppressed:
            state.suppress -= 1
        state.events.append(PublishedEvent(name, cfg.event_format, authority, ids, data, suppressed))
    if suppressed:
        log.info("fake coordinator: suppressed %s for %s", name, ids)
        return False
    await app[_RUNTIME_KEY]["redis"].publish(cfg.channel, data)
    return True


async def _initialize(app: web.Application, circuit: dict[str, Any], authority: str) -> None:
    """Broadcast ``created`` and wait for an ack naming the circuit (§4)."""
    pending: dict[str, asyncio.Future[None]] = app[_RUNTIME_KEY]["pending"]
    cid = circuit["id"]
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    pending[cid] = future  # registered before publishing: no lost ack
    try:
        if not await _publish(app, CREATED, authority, circuits=[copy.deepcopy(circuit)]):
            return
        try:
            await asyncio.wait_for(asyncio.shield(future), app[CONFIG_KEY].ack_timeout)
        except TimeoutError:
            raise _worker_not_responding(authority) from None
    finally:
        pending.pop(cid, None)


def _on_bus_message(app: web.Application, data: bytes) -> None:
    cfg, state = app[CONFIG_KEY], app[STATE_KEY]
    try:
        event = envelope.decode(data)
    except EnvelopeError as exc:
        with state.lock:
            state.dropped.append((f"undecodable: {exc}", data))
        return
    if event.name != ACK:
        return  # our own broadcasts echo back; other names are not ours
    if event.fmt != cfg.event_format:
        with state.lock:
            state.dropped.append((f"ack in the {event.fmt} format", data))
        return
    try:
        ids = [str(_StrictCircuit.model_validate(c).id) for c in event.circuits]
    except ValidationError as exc:
        with state.lock:
            state.dropped.append((f"ack with incomplete circuits: {exc.error_count()}", data))
        return
    with state.lock:
        state.acks.append(ReceivedAck(event.authority, ids, event.fmt, event.source, data))
    pending: dict[str, asyncio.Future[None]] = app[_RUNTIME_KEY]["pending"]
    for cid in ids:
        future = pending.get(cid)
        if future is not None and not future.done():
            future.set_result(None)


async def _listen(app: web.Application, pubsub: Any) -> None:
    while True:
        try:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("fake coordinator: bus read failed; retrying", exc_info=True)
            await asyncio.sleep(0.2)
            continue
        if message and message.get("type") == "message":
            data = message["data"]
            _on_bus_message(app, data if isinstance(data, bytes) else str(data).encode())


def check_lost_workers(state: CoordinatorState, timeout: float, now: float | None = None) -> list[str]:
    """Mark ALIVE workers whose last PATCH is older than ``timeout`` LOST."""
    current = time.monotonic() if now is None else now
    lost: list[str] = []
    with state.lock:
        for authority, seen in state.last_seen.items():
            row = state.worker_by_authority(authority)
            if row is not None and row["status"] == "ALIVE" and current - seen > timeout:
                row["status"] = "LOST"
                lost.append(authority)
    for authority in lost:
        log.info("fake coordinator: worker %s is LOST (heartbeat timeout)", authority)
    return lost


async def _lost_checker(app: web.Application) -> None:
    cfg = app[CONFIG_KEY]
    while True:
        await asyncio.sleep(cfg.lost_check_interval)
        check_lost_workers(app[STATE_KEY], cfg.heartbeat_timeout)


async def _bus_ctx(app: web.Application) -> AsyncIterator[None]:
    cfg = app[CONFIG_KEY]
    runtime = app[_RUNTIME_KEY]
    client = aioredis.from_url(cfg.redis_url)
    pubsub = client.pubsub()
    tasks: list[asyncio.Task[None]] = []
    try:
        await pubsub.subscribe(cfg.channel)
        # Wait for the confirmation so no ack published after startup is lost.
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            msg = await pubsub.get_message(ignore_subscribe_messages=False, timeout=1.0)
            if msg and msg.get("type") == "subscribe":
                break
        runtime["redis"] = client
        tasks.append(asyncio.create_task(_listen(app, pubsub)))
        tasks.append(asyncio.create_task(_lost_checker(app)))
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await pubsub.aclose()
        with contextlib.suppress(Exception):
            await client.aclose()


# -- middleware ---------------------------------------------------------------


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _errors_and_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        if request.match_info.http_exception is None:
            _check_auth(request, request.app[CONFIG_KEY].api_secret)
        return await handler(request)
    except ApiError as exc:
        return _json(exc.body, exc.status)
    except web.HTTPNotFound:
        return _json(
            {
                "type": PROBS + "url-not-found",
                "title": "Unknown URL path.",
                "error_code": "agent_request_not-found",
            },
            404,
        )
    except web.HTTPMethodNotAllowed:
        return _json(
            {
                "type": PROBS + "method-not-allowed",
                "title": "HTTP Method Not Allowed.",
                "error_code": "agent_request_bad-request",
            },
            405,
        )
    except web.HTTPException:
        raise
    except Exception:
        log.exception("fake coordinator: internal error")
        return _json(
            {
                "type": PROBS + "internal-server-error",
                "title": "Internal server error.",
                "error_code": "agent_generic_internal-error",
            },
            500,
        )


# -- worker API (§1) ----------------------------------------------------------


def _worker_or_404(state: CoordinatorState, request: web.Request) -> dict[str, Any]:
    row = state.workers.get(request.match_info["worker_id"].lower())
    if row is None:
        raise _not_found("worker")
    return row


async def put_worker(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    params = await _parse(request, _WorkerRequest)
    if params.frontend_mode == "wildcard" and not params.wildcard_domain:
        raise _invalid("Wildcard domain is required for WILDCARD_DOMAIN frontend mode")
    if params.frontend_mode == "port" and not params.port_range:
        raise _invalid("Port range is required for PORT frontend mode")
    slots = (
        -1
        if params.frontend_mode == "wildcard"
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
    with state.lock:
        row = state.worker_by_authority(params.authority)
        if row is not None:
            row.update(fields)  # accepted_traffics is never updated (§1.3)
            row["available_slots"] = slots
            row["updated_at"] = _now_iso()
            row["nodes"] += 1
            row["status"] = "ALIVE"
        else:
            now = _now_iso()
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
            state.workers[row["id"]] = row
        for f in params.app_filters:  # only ever added
            if f.model_dump() not in row["app_filters"]:
                row["app_filters"].append(f.model_dump())
        body = _worker_response(state, row)
    return _json(body)


async def list_workers(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    with state.lock:
        return _json({"workers": [_worker_response(state, w) for w in state.workers.values()]})


async def get_worker(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    with state.lock:
        return _json(_worker_response(state, _worker_or_404(state, request)))


async def heartbeat_worker(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    with state.lock:
        row = _worker_or_404(state, request)
        if row["status"] != "ALIVE":
            log.info("fake coordinator: worker %s revived by heartbeat", row["authority"])
        row["status"] = "ALIVE"
        row["updated_at"] = _now_iso()
        state.last_seen[row["authority"]] = time.monotonic()
        return _json(_worker_response(state, row))


async def delete_worker(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    with state.lock:
        row = _worker_or_404(state, request)
        row["nodes"] -= 1
        if row["nodes"] <= 0:
            row["status"] = "LOST"
    return _json({"success": True})


async def list_worker_circuits(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    with state.lock:
        row = _worker_or_404(state, request)
        return _json({"circuits": state.worker_circuits(row["id"])})


async def get_circuit(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    with state.lock:
        circuit = state.circuits.get(request.match_info["circuit_id"].lower())
        if circuit is None:
            raise _not_found("circuit")
        return _json(circuit)


# -- manager API (§6) -----------------------------------------------------------


async def _sync_endpoints(
    app: web.Application, items: list[tuple[UUID, _CreateItem | _CreateSingle]]
) -> list[dict[str, Any]]:
    """Commit every item first, then initialise the new circuits one by one."""
    state = app[STATE_KEY]
    results: list[dict[str, Any]] = []
    fresh: list[tuple[dict[str, Any], str]] = []
    with state.lock:
        staged: list[tuple[UUID, Any, dict[str, Any] | None, dict]] = []
        for endpoint_id, item in items:
            ep = state.endpoints.get(str(endpoint_id))
            if ep is not None and ep["circuit_id"] in state.circuits:
                staged.append((endpoint_id, item, None, {}))
                continue
            worker: dict[str, Any] | None = None
            preferred: dict[str, Any] = {}
            if item.tags.endpoint.existing_url:
                worker, preferred = _match_existing(state, item.tags.endpoint.existing_url)
            if worker is None:
                worker = _pick_worker(state)
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
                circuit = _new_circuit(state, item, endpoint_id, preferred, worker)
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
                    "url": _endpoint_url(circuit, wrow),
                    "health_check_enabled": hc is not None,
                }
            )
    for circuit, authority in fresh:
        await _initialize(app, circuit, authority)
    return results


async def create_bulk(request: web.Request) -> web.Response:
    params = await _parse(request, _BulkCreate)
    results = await _sync_endpoints(request.app, [(item.deployment_id, item) for item in params.endpoints])
    return _json({"endpoints": results})


async def create_single(request: web.Request) -> web.Response:
    try:
        endpoint_id = UUID(request.match_info["endpoint_id"])
    except ValueError:
        raise _invalid("endpoint_id must be a UUID") from None
    params = await _parse(request, _CreateSingle)
    [result] = await _sync_endpoints(request.app, [(endpoint_id, params)])
    return _json(
        {
            "success": True,
            "endpoint": result["url"],
            "health_check_enabled": result["health_check_enabled"],
        }
    )


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
        await _publish(app, REMOVED, authority, circuits=circuits)


async def delete_single(request: web.Request) -> web.Response:
    await _remove(request.app, [request.match_info["endpoint_id"]])
    return _json({"success": True})


async def delete_bulk(request: web.Request) -> web.Response:
    params = await _parse(request, _BulkDelete)
    ids = [str(item.deployment_id) for item in params.endpoints]
    await _remove(request.app, ids)
    return _json({"endpoints": [{"deployment_id": i, "success": True, "error": None} for i in ids]})


RouteOp = Callable[[list[dict[str, Any]], Any], list[dict[str, Any]]]


async def _change_routes(app: web.Application, items: list[tuple[UUID, Any]], op: RouteOp) -> list[dict[str, Any]]:
    state = app[STATE_KEY]
    results: list[dict[str, Any]] = []
    changed: list[tuple[str, dict[str, Any]]] = []
    with state.lock:
        for endpoint_id, arg in items:
            key = str(endpoint_id)
            ep = state.endpoints.get(key)
            circuit = state.circuits.get(ep["circuit_id"]) if ep else None
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
            circuit["updated_at"] = _now_iso()
            authority = state.workers[circuit["worker"]]["authority"]
            changed.append((authority, copy.deepcopy(circuit)))
            results.append({"deployment_id": key, "success": True, "error": None})
    for authority, circuit in changed:
        await _publish(
            app,
            ROUTE_UPDATED,
            authority,
            circuit=circuit,
            routes=copy.deepcopy(circuit["route_info"]),
        )
    return results


def _replace(_old: list[dict[str, Any]], routes: list[_RouteEntry]) -> list[dict[str, Any]]:
    return [_route_row(r) for r in routes]


def _register(old: list[dict[str, Any]], routes: list[_RouteEntry]) -> list[dict[str, Any]]:
    have = {r.get("route_id") for r in old}
    return old + [_route_row(r) for r in routes if str(r.route_id) not in have]


def _unregister(old: list[dict[str, Any]], route_ids: list[UUID]) -> list[dict[str, Any]]:
    drop = {str(r) for r in route_ids}
    return [r for r in old if r.get("route_id") not in drop]


async def routes_replace(request: web.Request) -> web.Response:
    params = await _parse(request, _BulkRoutes)
    items = [(i.deployment_id, i.routes) for i in params.endpoints]
    return _json({"endpoints": await _change_routes(request.app, items, _replace)})


async def routes_register(request: web.Request) -> web.Response:
    params = await _parse(request, _BulkRoutes)
    items = [(i.deployment_id, i.routes) for i in params.endpoints]
    return _json({"endpoints": await _change_routes(request.app, items, _register)})


async def routes_unregister(request: web.Request) -> web.Response:
    params = await _parse(request, _BulkUnregister)
    items = [(i.deployment_id, i.route_ids) for i in params.endpoints]
    return _json({"endpoints": await _change_routes(request.app, items, _unregister)})


def _circuit_for_endpoint(state: CoordinatorState, endpoint_id: str) -> dict[str, Any]:
    ep = state.endpoints.get(endpoint_id.lower())
    circuit = state.circuits.get(ep["circuit_id"]) if ep else None
    if ep is None or circuit is None:
        raise _not_found("inference-circuit")
    return circuit


async def put_health_check(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    params = await _parse(request, _HealthCheck)
    with state.lock:
        _circuit_for_endpoint(state, request.match_info["endpoint_id"])
        ep = state.endpoints[request.match_info["endpoint_id"].lower()]
        ep.update(
            health_check_enabled=params.health_check is not None,
            health_check=params.health_check,
        )
    return _json({"success": True})


async def mint_token(request: web.Request) -> web.Response:
    state, cfg = request.app[STATE_KEY], request.app[CONFIG_KEY]
    params = await _parse(request, _TokenRequest)
    with state.lock:
        circuit = _circuit_for_endpoint(state, request.match_info["endpoint_id"])
        worker = state.workers[circuit["worker"]]
        payload: dict[str, Any] = {k: v for k, v in circuit.items() if k != "route_info"}
        payload["app_url"] = _endpoint_url(circuit, worker)
    payload["user"] = str(params.user_uuid)
    payload["exp"] = params.exp
    token = jwt.encode(payload, cfg.jwt_secret, algorithm="HS256")
    return _json({"token": token})


# -- test-only knobs --------------------------------------------------------------


def set_traffic_ratio(
    state: CoordinatorState, endpoint_or_circuit_id: str, route_id: str, ratio: float
) -> dict[str, Any]:
    """Change one stored route's traffic_ratio (no event); returns the circuit copy."""
    key = str(endpoint_or_circuit_id).lower()
    with state.lock:
        circuit = state.circuits.get(key)
        if circuit is None:
            circuit = _circuit_for_endpoint(state, key)
        for route in circuit["route_info"]:
            if route.get("route_id") == str(route_id).lower():
                route["traffic_ratio"] = float(ratio)
                circuit["updated_at"] = _now_iso()
                return copy.deepcopy(circuit)
    raise _not_found("route")


def snapshot(state: CoordinatorState) -> dict[str, Any]:
    with state.lock:
        return {
            "workers": copy.deepcopy(list(state.workers.values())),
            "circuits": copy.deepcopy(list(state.circuits.values())),
            "endpoints": copy.deepcopy(state.endpoints),
            "events": [
                {
                    "name": e.name,
                    "fmt": e.fmt,
                    "authority": e.authority,
                    "circuit_ids": list(e.circuit_ids),
                    "suppressed": e.suppressed,
                }
                for e in state.events
            ],
            "acks": [
                {
                    "authority": a.authority,
                    "circuit_ids": list(a.circuit_ids),
                    "fmt": a.fmt,
                }
                for a in state.acks
            ],
            "dropped": [reason for reason, _ in state.dropped],
            "suppress": state.suppress,
        }


class _RatioKnob(_Model):
    endpoint_id: str | None = None
    circuit_id: str | None = None
    route_id: str
    traffic_ratio: float
    emit: bool = False


class _SuppressKnob(_Model):
    count: int = 1


async def knob_state(request: web.Request) -> web.Response:
    return _json(snapshot(request.app[STATE_KEY]))


async def knob_ratio(request: web.Request) -> web.Response:
    params = await _parse(request, _RatioKnob)
    target = params.circuit_id or params.endpoint_id
    if not target:
        raise _invalid("circuit_id or endpoint_id is required")
    circuit = set_traffic_ratio(request.app[STATE_KEY], target, params.route_id, params.traffic_ratio)
    if params.emit:
        state = request.app[STATE_KEY]
        with state.lock:
            authority = state.workers[circuit["worker"]]["authority"]
        await _publish(
            request.app,
            ROUTE_UPDATED,
            authority,
            circuit=circuit,
            routes=copy.deepcopy(circuit["route_info"]),
        )
    return _json(circuit)


async def knob_suppress(request: web.Request) -> web.Response:
    params = await _parse(request, _SuppressKnob)
    state = request.app[STATE_KEY]
    with state.lock:
        state.suppress += max(0, params.count)
        return _json({"suppress": state.suppress})


# -- app --------------------------------------------------------------------------


def make_app(
    api_secret: str,
    jwt_secret: str,
    redis_url: str,
    *,
    event_format: Format = "payload",
    ack_timeout: float = 15.0,
    heartbeat_timeout: float = 30.0,
    lost_check_interval: float = 15.0,
    emit_events: bool = True,
    channel: str = CHANNEL,
    state: CoordinatorState | None = None,
) -> web.Application:
    if event_format not in ("args", "payload"):
        raise ValueError(f"event_format must be 'args' or 'payload', not {event_format!r}")
    if not api_secret or not jwt_secret:
        raise ValueError("api_secret and jwt_secret must be non-empty")
    app = web.Application(middlewares=[_errors_and_auth])
    app[CONFIG_KEY] = FakeConfig(
        api_secret=api_secret,
        jwt_secret=jwt_secret,
        redis_url=redis_url,
        event_format=event_format,
        ack_timeout=ack_timeout,
        heartbeat_timeout=heartbeat_timeout,
        lost_check_interval=lost_check_interval,
        emit_events=emit_events,
        channel=channel,
    )
    app[STATE_KEY] = state if state is not None else CoordinatorState()
    app[_RUNTIME_KEY] = {"pending": {}, "redis": None}
    app.cleanup_ctx.append(_bus_ctx)
    r = app.router
    r.add_put("/api/worker", put_worker)
    r.add_get("/api/worker", list_workers)
    r.add_get("/api/worker/{worker_id}", get_worker)
    r.add_patch("/api/worker/{worker_id}", heartbeat_worker)
    r.add_delete("/api/worker/{worker_id}", delete_worker)
    r.add_get("/api/worker/{worker_id}/circuits", list_worker_circuits)
    r.add_get("/api/circuit/{circuit_id}", get_circuit)
    # Plain paths before the {endpoint_id} patterns they would also match.
    r.add_post("/v2/endpoints/bulk", create_bulk)
    r.add_delete("/v2/endpoints/bulk", delete_bulk)
    r.add_post("/v2/endpoints/bulk/routes", routes_replace)
    r.add_post("/v2/endpoints/bulk/routes/register", routes_register)
    r.add_post("/v2/endpoints/bulk/routes/unregister", routes_unregister)
    r.add_post("/v2/endpoints/{endpoint_id}", create_single)
    r.add_delete("/v2/endpoints/{endpoint_id}", delete_single)
    r.add_put("/v2/endpoints/{endpoint_id}/health-check", put_health_check)
    r.add_post("/v2/endpoints/{endpoint_id}/token", mint_token)
    r.add_get("/_test/state", knob_state)
    r.add_post("/_test/traffic-ratio", knob_ratio)
    r.add_post("/_test/suppress", knob_suppress)
    return app


class FakeCoordinator:
    """Runs ``make_app`` on 127.0.0.1 in a background thread.

    ``start()`` binds ``port`` (0 = any free port) and returns once serving;
    ``stop()`` shuts it down; a later ``start()`` rebinds the same port and
    keeps all state (a coordinator restart). Usable as a context manager.
    """

    def __init__(
        self,
        *,
        api_secret: str = "fake-api-secret",
        jwt_secret: str = "fake-jwt-secret",
        redis_url: str = "redis://127.0.0.1:6379/4",
        event_format: Format = "payload",
        ack_timeout: float = 15.0,
        heartbeat_timeout: float = 30.0,
        lost_check_interval: float = 15.0,
        emit_events: bool = True,
        channel: str = CHANNEL,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.api_secret = api_secret
        self.jwt_secret = jwt_secret
        self.redis_url = redis_url
        self.channel = channel
        self.event_format: Format = event_format
        self.host = host
        self.port = port
        self.state = CoordinatorState()
        self.ack_timeout = ack_timeout
        self.heartbeat_timeout = heartbeat_timeout
        self.lost_check_interval = lost_check_interval
        self.emit_events = emit_events
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._app: web.Application | None = None

    # lifecycle
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"X-BackendAI-Token": self.api_secret}

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout: float = 30.0) -> Self:
        if self.running:
            return self
        ready = threading.Event()
        failure: list[Exception] = []

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            app = make_app(
                self.api_secret,
                self.jwt_secret,
                self.redis_url,
                event_format=self.event_format,
                ack_timeout=self.ack_timeout,
                heartbeat_timeout=self.heartbeat_timeout,
                lost_check_interval=self.lost_check_interval,
                emit_events=self.emit_events,
                channel=self.channel,
                state=self.state,
            )
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
            try:
                await runner.setup()
                site = web.TCPSite(
                    runner,
                    self.host,
                    self.port,
                    reuse_address=True,
                    shutdown_timeout=1.0,
                )
                await site.start()
                self.port = runner.addresses[0][1]
                self._app = app
            except Exception as exc:  # re-raised by start()
                failure.append(exc)
                ready.set()
                await runner.cleanup()
                return
            ready.set()
            try:
                await self._stop.wait()
            finally:
                await runner.cleanup()

        self._thread = threading.Thread(target=lambda: asyncio.run(main()), name="fake-coordinator", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError("fake coordinator did not start in time")
        if failure:
            self._thread.join(timeout)
            self._thread = None
            raise RuntimeError(f"fake coordinator failed to start: {failure[0]!r}") from failure[0]
        return self

    def stop(self, timeout: float = 30.0) -> None:
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None:
            return
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout)
        self._thread = None
        self._app = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # inspection
    def snapshot(self) -> dict[str, Any]:
        return snapshot(self.state)

    def workers(self) -> list[dict[str, Any]]:
        with self.state.lock:
            return copy.deepcopy(list(self.state.workers.values()))

    def worker(self, authority: str) -> dict[str, Any] | None:
        with self.state.lock:
            return copy.deepcopy(self.state.worker_by_authority(authority))

    def circuits(self) -> list[dict[str, Any]]:
        with self.state.lock:
            return copy.deepcopy(list(self.state.circuits.values()))

    def circuit_for_endpoint(self, endpoint_id: str | UUID) -> dict[str, Any] | None:
        with self.state.lock:
            ep = self.state.endpoints.get(str(endpoint_id).lower())
            circuit = self.state.circuits.get(ep["circuit_id"]) if ep else None
            return copy.deepcopy(circuit)

    def events(self, name: str | None = None) -> list[PublishedEvent]:
        with self.state.lock:
            return [copy.copy(e) for e in self.state.events if name is None or e.name == name]

    def acks(self) -> list[ReceivedAck]:
        with self.state.lock:
            return [copy.copy(a) for a in self.state.acks]

    def dropped(self) -> list[str]:
        with self.state.lock:
            return [reason for reason, _ in self.state.dropped]

    # knobs
    def suppress_next_event(self, count: int = 1) -> None:
        with self.state.lock:
            self.state.suppress += count

    def set_traffic_ratio(
        self,
        endpoint_or_circuit_id: str | UUID,
        route_id: str | UUID,
        ratio: float,
        *,
        emit: bool = False,
        timeout: float = 10.0,
    ) -> dict[str, Any]:
        circuit = set_traffic_ratio(self.state, str(endpoint_or_circuit_id), str(route_id), ratio)
        if emit:
            app, loop = self._app, self._loop
            if app is None or loop is None:
                raise RuntimeError("the fake coordinator is not running")
            with self.state.lock:
                authority = self.state.workers[circuit["worker"]]["authority"]
            fut = asyncio.run_coroutine_threadsafe(
                _publish(
                    app,
                    ROUTE_UPDATED,
                    authority,
                    circuit=circuit,
                    routes=copy.deepcopy(circuit["route_info"]),
                ),
                loop,
            )
            fut.result(timeout)
        return circuit

    def check_lost_workers(self) -> list[str]:
        """Run the LOST check now (instead of waiting for the timer)."""
        return check_lost_workers(self.state, self.heartbeat_timeout)

    def wait_for(
        self,
        predicate: Callable[[], Any],
        timeout: float = 10.0,
        interval: float = 0.02,
    ) -> Any:
        """Poll ``predicate`` until truthy; return its value or raise TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(f"condition not met within {timeout:.1f}s")
            time.sleep(interval)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m appproxy.fake_coordinator",
        description="A fake Backend.AI AppProxy coordinator (for tests and demos).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=10200)
    parser.add_argument("--api-secret", default=os.environ.get("APPPROXY_API_SECRET"))
    parser.add_argument("--jwt-secret", default=os.environ.get("APPPROXY_JWT_SECRET"))
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/4")
    parser.add_argument("--channel", default=CHANNEL)
    parser.add_argument("--event-format", choices=("payload", "args"), default="payload")
    parser.add_argument("--ack-timeout", type=float, default=15.0)
    parser.add_argument("--heartbeat-timeout", type=float, default=30.0)
    parser.add_argument("--lost-check-interval", type=float, default=15.0)
    parser.add_argument(
        "--no-events",
        action="store_true",
        help="never publish events (like a Traefik-mode coordinator)",
    )
    args = parser.parse_args(argv)
    if not args.api_secret or not args.jwt_secret:
        parser.error("--api-secret and --jwt-secret (or APPPROXY_API_SECRET / APPPROXY_JWT_SECRET) are required")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    app = make_app(
        args.api_secret,
        args.jwt_secret,
        args.redis_url,
        event_format=args.event_format,
        ack_timeout=args.ack_timeout,
        heartbeat_timeout=args.heartbeat_timeout,
        lost_check_interval=args.lost_check_interval,
        emit_events=not args.no_events,
        channel=args.channel,
    )
    web.run_app(
        app,
        host=args.host,
        port=args.port,
        access_log=None,
        print=lambda *_: log.info("fake coordinator on http://%s:%s", args.host, args.port),
    )


if __name__ == "__main__":
    main()
