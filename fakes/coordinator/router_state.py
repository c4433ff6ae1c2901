"""What the fake remembers for ROUTER mode (BEP-1053), per authority.

Invariants:
- One ``RouterAuthority`` per authority, created on first use (a Manager may
  publish before any router node registers). Its ``revision`` starts at 0 and
  is bumped in the same locked step as every mutation; a no-op DELETE of a
  missing entity does not bump it.
- Names (primaries and aliases) are unique per authority.
- Liveness is per node: ``nodes`` maps node_id → last heartbeat (monotonic
  and wall clock); a node older than the heartbeat timeout is pruned, like a
  Valkey set member whose TTL ran out. A ROUTER worker is LOST only when no
  node of its authority is live.
- Stored keys carry ``token_hash`` and ``display_hint``; only the worker
  snapshot ever returns the hash.
- Pure data and functions: no aiohttp, no I/O; callers hold the state lock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from appproxy.envelope import Format

KEY_FIELDS = ("key_id", "token_hash", "allowed_models", "expires_at", "rate_limit", "allowed_client_ips")
LISTED_KEY_FIELDS = ("key_id", "display_hint", "allowed_models", "expires_at", "rate_limit", "allowed_client_ips")


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass
class RouterAuthority:
    revision: int = 0
    models: dict[str, dict[str, Any]] = field(default_factory=dict)  # primary name → snapshot entry
    keys: dict[str, dict[str, Any]] = field(default_factory=dict)  # key_id → stored row
    nodes: dict[str, tuple[float, str]] = field(default_factory=dict)  # node_id → (monotonic, iso)

    def bump(self) -> int:
        self.revision += 1
        return self.revision

    # -- names ----------------------------------------------------------------

    def name_clash(self, model: str, aliases: list[str]) -> str | None:
        """Why ``model`` with ``aliases`` would break name uniqueness, else None."""
        wanted = [model, *aliases]
        if len(set(wanted)) != len(wanted):
            return "a model's name and aliases must be distinct"
        taken: dict[str, str] = {}
        for other, entry in self.models.items():
            if other == model:
                continue
            for name in (other, *entry["aliases"]):
                taken[name] = other
        for name in wanted:
            if name in taken:
                return f"name {name!r} is already used by model {taken[name]!r}"
        return None

    # -- nodes ----------------------------------------------------------------

    def touch(self, node_id: str, now: float | None = None) -> None:
        self.nodes[node_id] = (time.monotonic() if now is None else now, _iso(time.time()))

    def prune(self, timeout: float, now: float | None = None) -> list[str]:
        """Drop nodes whose last heartbeat is older than ``timeout``; return them."""
        current = time.monotonic() if now is None else now
        expired = [n for n, (seen, _) in self.nodes.items() if current - seen > timeout]
        for node_id in expired:
            del self.nodes[node_id]
        return expired

    def live_nodes(self) -> list[str]:
        return sorted(self.nodes)

    def nodes_view(self) -> list[dict[str, str]]:
        return [{"node_id": n, "last_seen": self.nodes[n][1]} for n in sorted(self.nodes)]

    # -- views ----------------------------------------------------------------

    def snapshot(self, alt: bool = False) -> dict[str, Any]:
        """The router-config 200 body; ``alt`` uses the tolerated spellings."""
        models = [self.models[m] for m in sorted(self.models)]
        keys = [{f: self.keys[k][f] for f in KEY_FIELDS} for k in sorted(self.keys)]
        if not alt:
            return {"revision": str(self.revision), "models": models, "api_keys": keys}
        return {
            "revision": self.revision,
            "publications": [_kebab(m) for m in models],
            "api-keys": [_kebab(k) for k in keys],
        }

    def listed_keys(self) -> list[dict[str, Any]]:
        return [{f: self.keys[k][f] for f in LISTED_KEY_FIELDS} for k in sorted(self.keys)]


def _kebab(value: Any) -> Any:
    if isinstance(value, dict):
        return {k.replace("_", "-"): _kebab(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_kebab(v) for v in value]
    return value


@dataclass
class RouterEvent:
    name: str
    fmt: Format
    authority: str
    entity: str  # model name or key_id
    data: bytes
    suppressed: bool = False
    at: float = field(default_factory=time.monotonic)


@dataclass
class RouterAck:
    authority: str
    node_id: str | None
    kind: str  # as received
    id: str
    fmt: Format
    data: bytes
    at: float = field(default_factory=time.monotonic)


@dataclass
class RouterState:
    authorities: dict[str, RouterAuthority] = field(default_factory=dict)
    pulls: dict[str, dict[str, int]] = field(default_factory=dict)  # worker id → {"200": n, "304": n}
    events: list[RouterEvent] = field(default_factory=list)
    acks: list[RouterAck] = field(default_factory=list)
    alt_spelling: bool = False  # test knob: snapshot in kebab-case etc.

    def of(self, authority: str) -> RouterAuthority:
        return self.authorities.setdefault(authority, RouterAuthority())

    def count_pull(self, worker_id: str, status: int) -> None:
        counts = self.pulls.setdefault(worker_id, {"200": 0, "304": 0})
        counts[str(status)] += 1

    def view(self) -> dict[str, Any]:
        """What ``/_test/`` shows: no token hashes."""
        return {
            "authorities": {
                a: {
                    "revision": r.revision,
                    "models": [r.models[m] for m in sorted(r.models)],
                    "api_keys": r.listed_keys(),
                    "nodes": r.nodes_view(),
                }
                for a, r in self.authorities.items()
            },
            "pulls": {w: dict(c) for w, c in self.pulls.items()},
            "events": [
                {"name": e.name, "fmt": e.fmt, "authority": e.authority, "entity": e.entity, "suppressed": e.suppressed}
                for e in self.events
            ],
            "acks": [
                {"authority": a.authority, "node_id": a.node_id, "kind": a.kind, "id": a.id, "fmt": a.fmt}
                for a in self.acks
            ],
            "alt_spelling": self.alt_spelling,
        }
