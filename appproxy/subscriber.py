"""The events process: Redis Pub/Sub on ``events_all-appproxy`` → apply → ack.

Runs inside ``manage.py runworker appproxy`` (appproxy/management/commands/
runworker.py), in that command's event loop.

Invariants (reference §§3-4, LEG-4):
- Messages in arrival order; DB work runs in one worker thread (the ORM is
  synchronous), never on the event loop. What has already arrived is taken
  in one batch (at most BATCH_MAX) and a run of consecutive route_updated
  events in it is applied as one reconcile: a burst of 1,000 route updates
  costs a few applies, not 1,000.
- A malformed message is logged, recorded (EventRecord ok=False) and
  dropped; unknown names, our own acks echoing back and events for other
  authorities are ignored.
- ``created`` is acked after the apply has committed and the change notice
  went out, echoing the complete circuit objects, in the envelope format the
  event arrived in (or the operator-pinned ``event_format``).
- On every (re)subscription the tasks process is asked for a full pull, so
  whatever was published while we were not listening is filled in.
- Connection loss → reconnect with exponential backoff (0.2 s … 5 s).
- While subscribed, a short-lived Redis key says so; registration waits for
  it (subscribe before registering, reference §4).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from django.utils import timezone
from redis.exceptions import RedisError

from router.config_schema import ConfigError
from router.dbthread import DbThread
from router.redis import async_client

from . import envelope, modes, node
from .envelope import CREATED, ROUTE_UPDATED, EnvelopeError
from .events import (
    APPLIED_EVENTS,
    EventRejected,
    apply_event,
    apply_route_updates,
    record_event,
    record_events,
    routed_circuit,
)
from .mode import Mode
from .modes import Settings, active_settings
from .subscribed import alive_key
from .worker import request_pull

log = logging.getLogger(__name__)

__all__ = ["Subscriber"]

ALIVE_TTL = 10
ALIVE_REFRESH = 3.0
CONFIG_CHECK = 1.0
WARM_EVERY = 1.0  # s between idle calls of the mode's Mode.idle (ROUTER: its publications read ahead)
BATCH_MAX = 256  # messages taken off the socket at once (a burst)


def _session_key(s: Settings) -> tuple[Any, ...]:
    return (s.mode, s.enabled, s.events_enabled, s.bus_url(), s.channel, s.authority)


def _node_id() -> str:
    return node.current()


class Subscriber:
    def __init__(self, *, stop: asyncio.Event | None = None, loader: Callable[[], Any] = active_settings) -> None:
        self.stop = stop or asyncio.Event()
        self._load = loader
        self._thread = DbThread("appproxy-events")
        self.subscriptions = 0  # confirmed (re)subscriptions, for tests and /status

    # -- helpers -----------------------------------------------------------
    async def _db(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # One thread, its connection kept (router.dbthread: a new PostgreSQL
        # connection per call was most of each event's cost in a burst).
        return await self._thread.run(fn, *args, **kwargs)

    async def _settings(self) -> Settings | None:
        """The section as applied to the DB (read off the event loop: it queries)."""
        try:
            return await self._db(self._load)
        except ConfigError as exc:
            log.error("appproxy: config error: %s", exc)
            return None

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)

    # -- main loop ---------------------------------------------------------
    async def run(self) -> None:
        delay = 0.2
        idle_logged = False
        try:
            while not self.stop.is_set():
                s = await self._settings()
                if s is None or not s.enabled or not s.events_enabled:
                    if not idle_logged:
                        log.info("appproxy: events are disabled (appproxy.enabled / events_enabled); idle")
                        idle_logged = True
                    await self._sleep(CONFIG_CHECK)
                    continue
                idle_logged = False
                try:
                    await self._session(s)
                    delay = 0.2
                except (RedisError, OSError) as exc:
                    log.warning(
                        "appproxy: event bus connection lost (%s); reconnecting in %.1fs", type(exc).__name__, delay
                    )
                    await self._sleep(delay)
                    delay = min(delay * 2, 5.0)
                except Exception:  # never fatal: log, back off, subscribe again
                    log.exception("appproxy: event subscriber failed; restarting in %.1fs", delay)
                    await self._sleep(delay)
                    delay = min(delay * 2, 5.0)
        finally:
            self._thread.shutdown()

    async def _session(self, s: Settings) -> None:
        key = _session_key(s)
        bus = aioredis.from_url(
            s.bus_url(),
            client_name=f"appproxy-events:{s.authority}",
            socket_connect_timeout=3,
            socket_keepalive=True,
        )
        pubsub = bus.pubsub()
        node = async_client()
        alive_at = 0.0
        subscribed = False
        checked_at = time.monotonic()
        warmed_at = 0.0
        mode = modes.of(s)  # the session ends when the mode changes (_session_key)
        try:
            await pubsub.subscribe(s.channel)
            while not self.stop.is_set():
                now = time.monotonic()
                if subscribed and now - alive_at >= ALIVE_REFRESH:
                    await node.set(alive_key(s.authority), str(self.subscriptions), ex=ALIVE_TTL)
                    alive_at = now
                if now - checked_at >= CONFIG_CHECK:
                    checked_at = now
                    fresh = await self._settings()
                    if fresh is None or _session_key(fresh) != key:
                        log.info("appproxy: event settings changed; resubscribing")
                        return
                    s = fresh  # e.g. a new event_format applies at once
                message = await pubsub.get_message(ignore_subscribe_messages=False, timeout=1.0)
                if message is None:
                    if mode.idle is not None and subscribed and now - warmed_at >= WARM_EVERY:
                        # Idle: ROUTER reads the publications an event plans
                        # with now rather than by the next event (a revision
                        # read when nothing changed).
                        warmed_at = now
                        try:
                            await self._db(mode.idle, s.authority)
                        except Exception as exc:  # the DB is down: the next event reads them itself
                            log.debug("appproxy: publications not read ahead (%s)", type(exc).__name__)
                    continue
                kind = message.get("type")
                if kind == "subscribe":
                    await self._subscribed(s, node)
                    subscribed, alive_at = True, time.monotonic()
                elif kind == "message":
                    batch = [message["data"]]
                    # What else is already here (a burst): consecutive route
                    # updates are applied together (handle_batch). Bounded; a
                    # non-message stops it and is handled on the next turn.
                    while len(batch) < BATCH_MAX:
                        more = await pubsub.get_message(ignore_subscribe_messages=False, timeout=0)
                        if more is None:
                            break
                        if more.get("type") != "message":
                            if more.get("type") == "subscribe":
                                await self._subscribed(s, node)
                                subscribed, alive_at = True, time.monotonic()
                            continue
                        batch.append(more["data"])
                    await self.handle_batch(bus, s, batch)
        finally:
            with contextlib.suppress(Exception):
                await node.delete(alive_key(s.authority))
            with contextlib.suppress(Exception):
                await pubsub.aclose()
            with contextlib.suppress(Exception):
                await bus.aclose()

    async def _subscribed(self, s: Settings, node: Any) -> None:
        self.subscriptions += 1
        await node.set(alive_key(s.authority), str(self.subscriptions), ex=ALIVE_TTL)
        log.info(
            "appproxy: subscribed to the event bus",
            extra={"channel": s.channel, "authority": s.authority, "subscriptions": self.subscriptions},
        )
        # Whatever was published while we were not listening: a full pull.
        await self._db(request_pull, s.authority, await self._db(_node_id))

    # -- messages --------------------------------------------------------------
    async def handle(self, bus: Any, s: Settings, data: bytes) -> None:
        await self.handle_batch(bus, s, [data])

    async def handle_batch(self, bus: Any, s: Settings, batch: list[bytes]) -> None:
        """Messages in arrival order; a run of consecutive route_updated
        events is applied in one reconcile (each names its circuit's whole
        route list, so they commute across circuits and the later wins for one)."""
        run: list[tuple[Any, Any]] = []
        for data in batch:
            received = timezone.now()
            try:
                event = envelope.decode(data)
            except EnvelopeError as exc:
                log.warning("appproxy: malformed event dropped: %s", exc)
                await self._db(record_event, name="(malformed)", received_at=received, ok=False, detail=str(exc))
                continue
            if event.name == ROUTE_UPDATED and event.authority == s.authority:
                run.append((event, received))
                continue
            await self._route_updates(bus, s, run)
            run = []
            await self._one(bus, s, event, received)
        await self._route_updates(bus, s, run)

    def _base(self, event: Any, received: Any) -> dict[str, Any]:
        return {
            "name": event.name,
            "fmt": event.fmt,
            "authority": event.authority,
            "circuit_ids": event.circuit_ids,
            "received_at": received,
        }

    async def _route_updates(self, bus: Any, s: Settings, run: list[tuple[Any, Any]]) -> None:
        if len(run) < 2:
            for event, received in run:
                await self._one(bus, s, event, received)
            return
        circuits = []
        for event, received in run:
            try:
                circuits.append(routed_circuit(event))
            except EventRejected as exc:
                log.warning("appproxy: %s dropped: %s", event.name, exc)
                await self._db(record_event, **self._base(event, received), ok=False, detail=str(exc))
        try:
            await self._db(apply_route_updates, circuits, s)
        except Exception as exc:
            log.exception("appproxy: %d route updates not applied", len(circuits))
            failed = f"not applied: {type(exc).__name__}"
            await self._db(record_events, [{**self._base(e, r), "ok": False, "detail": failed} for e, r in run])
            return
        applied = timezone.now()
        log.info("appproxy: events applied", extra={"route_updated": len(run), "circuits": len(circuits)})
        detail = f"one apply of {len(run)}"
        await self._db(
            record_events, [{**self._base(e, r), "applied_at": applied, "ok": True, "detail": detail} for e, r in run]
        )

    async def _one(self, bus: Any, s: Settings, event: Any, received: Any) -> None:
        mode = modes.of(s)
        if mode.events is not None and event.name in mode.events.names:
            await self._own_event(bus, s, mode, event, received)
            return
        if event.name not in APPLIED_EVENTS or event.authority != s.authority:
            return
        base = self._base(event, received)
        try:
            outcome = await self._db(apply_event, event, s)
        except EventRejected as exc:
            log.warning("appproxy: %s dropped: %s", event.name, exc)
            await self._db(record_event, **base, ok=False, detail=str(exc))
            return
        except Exception as exc:
            log.exception("appproxy: %s not applied", event.name)
            await self._db(record_event, **base, ok=False, detail=f"not applied: {type(exc).__name__}")
            return
        ack = None
        if event.name == CREATED and outcome.ack:
            # Unpublished, the manager's create fails (503), the coordinator
            # keeps the row, and our pulls keep it mirrored.
            ack = envelope.encode_ack(s.authority, outcome.ack, s.ack_format(event.fmt), request_id=event.request_id)
        await self._acked(bus, s, base, ack, "appproxy: event applied", {"circuits": event.circuit_ids}, outcome.detail)

    async def _acked(
        self,
        bus: Any,
        s: Settings,
        base: dict[str, Any],
        ack: bytes | None,
        message: str,
        extra: dict[str, Any],
        detail: str = "",
    ) -> tuple[Any, Any]:
        """After an apply: publish its ack (if any), log, record. Returns
        (applied_at, acked_at or None). An ack the bus refuses is recorded
        and re-raised (the session reconnects)."""
        received = base["received_at"]
        applied = timezone.now()
        acked = None
        if ack is not None:
            try:
                await bus.publish(s.channel, ack)
            except RedisError:
                await self._db(record_event, **base, applied_at=applied, ok=False, detail="ack not published")
                raise
            acked = timezone.now()
        log.info(
            message,
            extra={
                "event": base["name"],
                "fmt": base["fmt"],
                **extra,
                "apply_ms": round((applied - received).total_seconds() * 1000, 1),
                "acked": acked is not None,
            },
        )
        await self._db(record_event, **base, applied_at=applied, acked_at=acked, ok=True, detail=detail)
        return applied, acked

    # -- a mode's own events (Mode.events; ROUTER: publications and keys) ------
    async def _own_event(self, bus: Any, s: Settings, mode: Mode, event: Any, received: Any) -> None:
        own = mode.events
        assert own is not None
        try:
            ev = own.decode(event)
        except EnvelopeError as exc:
            log.warning("%s: %s dropped: %s", mode.section, event.name, exc)
            await self._db(
                record_event, name=event.name, fmt=event.fmt, received_at=received, ok=False, detail=str(exc)
            )
            return
        if ev.authority != s.authority:
            return
        base = {
            "name": ev.name,
            "fmt": ev.fmt,
            "authority": ev.authority,
            "circuit_ids": [ev.ack_id],
            "received_at": received,
        }
        node_id = await self._db(_node_id)
        try:
            await self._db(own.apply, ev, s, node_id)
        except Exception as exc:
            log.warning(
                "%s: %s %s not applied (%s); the next pull heals it",
                mode.section,
                ev.name,
                ev.ack_id,
                type(exc).__name__,
            )
            await self._db(record_event, **base, ok=False, detail=f"not applied: {type(exc).__name__}")
            await self._db(own.counted, ev.name, False, None, None)
            return
        ack = None
        if node_id:
            ack = own.ack(s.authority, node_id, ev.kind, ev.ack_id, s.ack_format(ev.fmt), request_id=event.request_id)
        applied, acked = await self._acked(bus, s, base, ack, f"{mode.section}: event applied", {"id": ev.ack_id})
        await self._db(
            own.counted,
            ev.name,
            True,
            (applied - received).total_seconds(),
            (acked - received).total_seconds() if acked is not None else None,
        )

