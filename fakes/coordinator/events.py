"""Events out and acks in, on the Redis Pub/Sub channel (reference §3).

Invariants:
- Every event is published in the one configured format, and recorded in
  ``state.events`` whether or not it went out. Nothing is published when
  events are off; a suppressed event is recorded as suppressed and not sent.
- An ack is accepted only in the configured format and only when every
  circuit in it is a complete SerializableCircuit, as the real parser
  demands; anything else is recorded in ``state.dropped``. An accepted ack
  resolves the pending ack wait of each circuit it names. ROUTER messages go
  to ``router_events`` first (acks in either format).
- The channel is subscribed, and its confirmation awaited (up to 10 s),
  before the server takes requests, so no ack published after startup is
  lost; a failed bus read is retried, never fatal.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import redis.asyncio as aioredis
from aiohttp import web
from pydantic import AliasChoices, Field, ValidationError

from appproxy import envelope
from appproxy.envelope import ACK, ROUTE_UPDATED, EnvelopeError

from . import router_events
from .bodies import Model, Protocol
from .state import CONFIG_KEY, RUNTIME_KEY, STATE_KEY, PublishedEvent, ReceivedAck, check_lost_workers

log = logging.getLogger(__name__)


# What the real coordinator's ack parser demands: every required field of a
# SerializableCircuit (reference §2.1), or the whole ack is dropped.
class StrictRoute(Model):
    route_id: UUID | None = Field(default=None, validation_alias=AliasChoices("route-id", "route_id"))
    session_id: UUID = Field(validation_alias=AliasChoices("session-id", "session_id"))
    session_name: str | None = Field(default=None, validation_alias=AliasChoices("session-name", "session_name"))
    kernel_host: str | None = Field(validation_alias=AliasChoices("kernel-host", "kernel_host"))
    kernel_port: int = Field(ge=1, le=65535, validation_alias=AliasChoices("kernel-port", "kernel_port"))
    protocol: Protocol
    traffic_ratio: float = 1.0


class StrictCircuit(Model):
    id: UUID
    app: str
    protocol: Protocol
    worker: UUID
    app_mode: Literal["interactive", "inference"]
    frontend_mode: Literal["wildcard", "port", "router"]
    envs: dict[str, Any]
    arguments: str | None
    open_to_public: bool
    allowed_client_ips: str | None = None
    port: int | None = None
    subdomain: str | None = None
    user_id: UUID | None = None
    endpoint_id: UUID | None = None
    runtime_variant: str | None = None
    route_info: list[StrictRoute]
    session_ids: list[UUID]
    created_at: datetime
    updated_at: datetime


async def publish(
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
    await app[RUNTIME_KEY]["redis"].publish(cfg.channel, data)
    return True


async def publish_route_update(app: web.Application, circuit: dict[str, Any]) -> bool:
    """``route_updated`` with the circuit's full route list, to its worker."""
    state = app[STATE_KEY]
    with state.lock:
        authority = state.workers[circuit["worker"]]["authority"]
    return await publish(
        app,
        ROUTE_UPDATED,
        authority,
        circuit=circuit,
        routes=copy.deepcopy(circuit["route_info"]),
    )


def on_bus_message(app: web.Application, data: bytes) -> None:
    cfg, state = app[CONFIG_KEY], app[STATE_KEY]
    if router_events.on_message(app, data):
        return
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
        ids = [str(StrictCircuit.model_validate(c).id) for c in event.circuits]
    except ValidationError as exc:
        with state.lock:
            state.dropped.append((f"ack with incomplete circuits: {exc.error_count()}", data))
        return
    with state.lock:
        state.acks.append(ReceivedAck(event.authority, ids, event.fmt, event.source, data))
    pending: dict[str, asyncio.Future[None]] = app[RUNTIME_KEY]["pending"]
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
            on_bus_message(app, data if isinstance(data, bytes) else str(data).encode())


async def _lost_checker(app: web.Application) -> None:
    cfg = app[CONFIG_KEY]
    while True:
        await asyncio.sleep(cfg.lost_check_interval)
        check_lost_workers(app[STATE_KEY], cfg.heartbeat_timeout)


async def bus_ctx(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context: the Redis client, the ack listener and the LOST timer."""
    cfg = app[CONFIG_KEY]
    runtime = app[RUNTIME_KEY]
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
