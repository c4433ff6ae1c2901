"""What the fake remembers, and the heartbeat rule that marks workers LOST.

Invariants:
- ``CoordinatorState`` outlives the HTTP server: a restart keeps every
  worker, circuit, endpoint, event and ack.
- It is mutated on the server's event loop under ``lock``; other threads read
  it only under the lock, and get copies.
- Only a heartbeat (PATCH) records ``last_seen``; a worker ALIVE whose
  ``last_seen`` is older than the heartbeat timeout becomes LOST at the next
  check, and gets no new circuits until its next PATCH.
- A ROUTER worker's liveness is per node (``router_state``): at each check
  its expired nodes are pruned, and it is LOST only when none is left.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from appproxy.envelope import CHANNEL, Format

from .router_state import RouterState

log = logging.getLogger(__name__)


def now_iso() -> str:
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
class Deregistration:
    """One accepted DELETE /api/worker/{id} (``node_id`` for a ROUTER node)."""

    authority: str
    node_id: str | None
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
    deregistrations: list[Deregistration] = field(default_factory=list)
    suppress: int = 0
    router: RouterState = field(default_factory=RouterState)

    def worker_by_authority(self, authority: str) -> dict[str, Any] | None:
        return next((w for w in self.workers.values() if w["authority"] == authority), None)

    def worker_circuits(self, worker_id: str) -> list[dict[str, Any]]:
        return [c for c in self.circuits.values() if c["worker"] == worker_id]

    def endpoint_circuit(self, endpoint_id: str) -> dict[str, Any] | None:
        """The live circuit of an endpoint (ids in any case), else None."""
        ep = self.endpoints.get(endpoint_id.lower())
        return self.circuits.get(ep["circuit_id"]) if ep else None


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
# {"pending": {circuit id: future resolved by its ack}, "redis": client or None,
#  "router_waiters": [router_events.AckWaiter, …]}
RUNTIME_KEY = web.AppKey("fake_coordinator.runtime", dict)


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
        lost.extend(check_router_workers(state, timeout, current))
    for authority in lost:
        log.info("fake coordinator: worker %s is LOST (heartbeat timeout)", authority)
    return lost


def check_router_workers(state: CoordinatorState, timeout: float, now: float | None = None) -> list[str]:
    """Prune expired ROUTER nodes; mark ALIVE ROUTER workers with none left LOST.

    Call with the state lock held; returns the authorities that became LOST.
    """
    lost: list[str] = []
    for row in state.workers.values():
        if row["frontend_mode"] != "router":
            continue
        auth = state.router.of(row["authority"])
        auth.prune(timeout, now)
        if row["status"] == "ALIVE" and not auth.nodes:
            row["status"] = "LOST"
            lost.append(row["authority"])
    return lost


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
            "router": state.router.view(),
        }
