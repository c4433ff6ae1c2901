"""ROUTER events out and config-applied acks in (BEP-1053, router-mode.md §1.3).

This codec is the fake's own, written from the contract, on purpose: it must
not share code with the product's, so each can catch the other's mistakes.

Invariants:
- Four events go out, in the configured envelope format: ``args`` is
  base64(msgpack([authority, value])) with every element a str (a model's
  state as compact JSON text); ``payload`` is a JSON string of
  ``{"target_worker_authority", <field>}`` where the field is ``model`` (an
  object), ``model_name`` or ``key_id``. A key event never carries a token or
  a hash.
- Every event is recorded in ``state.router.events``; none is sent when
  events are off, and a suppressed one (the shared suppress counter) is
  recorded as suppressed and not sent. Neither is waited for.
- An ack ``appproxy_worker_router_config_applied_event`` is accepted in
  either format, with ``(authority, node_id, kind, id)`` or the older
  ``(authority, kind, id)``; ``kind`` matches on its ``model``/``key``
  prefix. Accepted acks are recorded and wake the matching waiters; the rest
  go to ``state.dropped``.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

import msgpack
import orjson
from aiohttp import web

from appproxy.envelope import Format

from .router_state import RouterAck, RouterEvent
from .state import CONFIG_KEY, RUNTIME_KEY, STATE_KEY

log = logging.getLogger(__name__)

MODEL_UPDATED = "appproxy_router_model_updated_event"
MODEL_REMOVED = "appproxy_router_model_removed_event"
KEY_UPDATED = "appproxy_router_key_updated_event"
KEY_REMOVED = "appproxy_router_key_removed_event"
CONFIG_APPLIED = "appproxy_worker_router_config_applied_event"
OUTBOUND = frozenset({MODEL_UPDATED, MODEL_REMOVED, KEY_UPDATED, KEY_REMOVED})
SOURCE = "appproxy-coordinator"

Kind = Literal["model", "key"]
# event name → (ack kind, payload field)
_FIELDS: dict[str, tuple[Kind, str]] = {
    MODEL_UPDATED: ("model", "model"),
    MODEL_REMOVED: ("model", "model_name"),
    KEY_UPDATED: ("key", "key_id"),
    KEY_REMOVED: ("key", "key_id"),
}


def _compact(value: Any) -> str:
    return orjson.dumps(value).decode()


def metadata(fmt: Format) -> str:
    meta: dict[str, Any] = {"request_id": None, "user": None, "triggered_user": None}
    if fmt == "payload":
        meta["traceparent"] = None
    return _compact(meta)


def pack_args(args: list[str]) -> str:
    """base64(msgpack(array of str)): fixarray/array16 of fixstr/str8/str16/str32."""
    return base64.b64encode(msgpack.packb(args, use_bin_type=True)).decode("ascii")


def encode(name: str, fmt: Format, authority: str, value: Any) -> bytes:
    """One outbound ROUTER event; ``value`` is the model entry (model_updated),
    else the model name or key_id."""
    _, fld = _FIELDS[name]
    msg: dict[str, Any] = {"name": name, "source": SOURCE}
    if fmt == "payload":
        msg["payload"] = _compact({"target_worker_authority": authority, fld: value})
    else:
        msg["args"] = pack_args([authority, value if isinstance(value, str) else _compact(value)])
    msg["metadata"] = metadata(fmt)
    return orjson.dumps(msg)


# -- ack waits -----------------------------------------------------------------


@dataclass
class AckWaiter:
    authority: str
    kind: Kind
    entity: str
    first: asyncio.Future[str | None]
    nodes: set[str] = field(default_factory=set)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def matches(self, ack: RouterAck) -> bool:
        return ack.authority == self.authority and ack.kind.lower().startswith(self.kind) and ack.id == self.entity

    def take(self, ack: RouterAck) -> None:
        if not self.first.done():
            self.first.set_result(ack.node_id)
        if ack.node_id:
            self.nodes.add(ack.node_id)
        self.changed.set()


@dataclass
class Propagation:
    sent: bool
    acked_by: str | None = None
    acked: bool = False
    unconfirmed: list[str] = field(default_factory=list)

    def body(self, strict: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"propagation": "acked" if self.acked else "deferred", "acked_by": self.acked_by}
        if strict:
            out["unconfirmed_nodes"] = self.unconfirmed
        return out


async def publish_and_wait(
    app: web.Application,
    name: str,
    authority: str,
    value: Any,
    *,
    expect: list[str] | None = None,
) -> Propagation:
    """Publish one ROUTER event and wait ``ack_timeout`` for its first ack;
    with ``expect`` (strict), for an ack from each of those nodes."""
    cfg = app[CONFIG_KEY]
    kind, _ = _FIELDS[name]
    entity = value["model"] if isinstance(value, dict) else value
    waiters: list[AckWaiter] = app[RUNTIME_KEY]["router_waiters"]
    loop = asyncio.get_running_loop()
    waiter = AckWaiter(authority, kind, entity, loop.create_future())
    waiters.append(waiter)  # before publishing: no lost ack
    try:
        if not await _publish(app, name, authority, entity, value):
            return Propagation(sent=False, unconfirmed=list(expect or []))
        deadline = loop.time() + cfg.ack_timeout
        result = Propagation(sent=True)
        try:
            result.acked_by = await asyncio.wait_for(asyncio.shield(waiter.first), cfg.ack_timeout)
            result.acked = True
        except TimeoutError:
            log.info("fake coordinator: no ack for %s %s within %.1fs (deferred)", kind, entity, cfg.ack_timeout)
        if expect is not None:
            while not set(expect) <= waiter.nodes:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                waiter.changed.clear()
                try:
                    await asyncio.wait_for(waiter.changed.wait(), remaining)
                except TimeoutError:
                    break
            result.unconfirmed = sorted(set(expect) - waiter.nodes)
        return result
    finally:
        waiters.remove(waiter)


async def _publish(app: web.Application, name: str, authority: str, entity: str, value: Any) -> bool:
    cfg, state = app[CONFIG_KEY], app[STATE_KEY]
    if not cfg.emit_events:
        return False
    data = encode(name, cfg.event_format, authority, value)
    with state.lock:
        suppressed = state.suppress > 0
        if suppressed:
            state.suppress -= 1
        state.router.events.append(RouterEvent(name, cfg.event_format, authority, entity, data, suppressed))
    if suppressed:
        log.info("fake coordinator: suppressed %s for %s", name, entity)
        return False
    await app[RUNTIME_KEY]["redis"].publish(cfg.channel, data)
    return True


# -- acks in -------------------------------------------------------------------


def _ack_fields(msg: dict[str, Any]) -> tuple[Format, list[Any]]:
    if "payload" in msg:
        body = msg["payload"]
        payload = body if isinstance(body, dict) else orjson.loads(body)
        if not isinstance(payload, dict):
            raise ValueError("payload is not an object")
        fields = [
            payload.get("target_worker_authority"),
            payload.get("node_id"),
            payload.get("kind"),
            payload.get("id"),
        ]
        return "payload", fields
    if "args" in msg:
        args = msgpack.unpackb(base64.b64decode(msg["args"], validate=True), raw=False)
        if not isinstance(args, list) or len(args) not in (3, 4):
            raise ValueError("args must pack 3 or 4 values")
        if len(args) == 3:
            args = [args[0], None, *args[1:]]
        return "args", args
    raise ValueError("neither args nor payload")


def on_message(app: web.Application, data: bytes) -> bool:
    """Handle a bus message if it is a ROUTER one; False leaves it to the caller."""
    try:
        msg = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    name = msg.get("name") if isinstance(msg, dict) else None
    if name in OUTBOUND:
        return True  # our own broadcast echoing back
    if name != CONFIG_APPLIED:
        return False
    state = app[STATE_KEY]
    try:
        fmt, (authority, node_id, kind, entity) = _ack_fields(msg)
        if not all(isinstance(v, str) and v for v in (authority, kind, entity)):
            raise ValueError("authority, kind and id must be non-empty strings")
        if node_id is not None and not isinstance(node_id, str):
            raise ValueError("node_id must be a string")
        if not kind.lower().startswith(("model", "key")):
            raise ValueError(f"unknown kind {kind!r}")
    except Exception as exc:  # base64, msgpack and JSON raise several unrelated types
        with state.lock:
            state.dropped.append((f"router ack: {exc}", data))
        return True
    ack = RouterAck(authority, node_id or None, kind, entity, fmt, data)
    with state.lock:
        state.router.acks.append(ack)
    for waiter in list(app[RUNTIME_KEY]["router_waiters"]):
        if waiter.matches(ack):
            waiter.take(ack)
    return True
