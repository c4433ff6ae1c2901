"""The ``appproxy-*`` backends every AppProxy mode plans, and the diff of a
plan against the live set: pure, shared by both modes.

Invariants:
- Every backend a mode plans is named ``appproxy-<circuit_id>-r<route key>``
  (``NAME_PREFIX``; ``circuit_scope`` is one circuit's prefix), points at
  ``http://{kernel_host or localhost}:{kernel_port}`` (``route_url``), has a
  weight in [``MIN_WEIGHT``, ``MAX_WEIGHT``] and source ``appproxy``.
- ``plan`` only ever touches rows whose source is ``appproxy``: it never
  updates or removes another namespace's backend, and a desired name that is
  already owned by another namespace is reported as a conflict, not applied.
- No I/O, no clocks, no Django: deterministic and ordered by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from router.core.backend import BackendSpec

from .wire import Circuit, RouteInfo

__all__ = [
    "MAX_WEIGHT",
    "MIN_WEIGHT",
    "NAME_PREFIX",
    "SOURCE",
    "Plan",
    "backend_name",
    "circuit_scope",
    "plan",
    "route_url",
]

SOURCE = "appproxy"
NAME_PREFIX = "appproxy-"
MIN_WEIGHT = 1
MAX_WEIGHT = 1000


def backend_name(circuit: Circuit, route: RouteInfo) -> str:
    return f"{circuit_scope(str(circuit.id))}{route.key}"


def circuit_scope(circuit_id: str) -> str:
    """The name prefix of every backend of one circuit (its replicas)."""
    return f"{NAME_PREFIX}{circuit_id}-r"


def route_url(route: RouteInfo) -> str:
    host = route.host
    # An IPv6 literal needs brackets in a URL authority.
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{route.kernel_port}"


@dataclass(frozen=True, slots=True)
class Plan:
    add: tuple[BackendSpec, ...] = ()
    update: tuple[BackendSpec, ...] = ()  # the new specs
    remove: tuple[str, ...] = ()  # names
    conflicts: tuple[str, ...] = ()  # desired names owned by another source

    @property
    def is_empty(self) -> bool:
        return not (self.add or self.update or self.remove)

    def __bool__(self) -> bool:
        return not self.is_empty


def plan(desired: Mapping[str, BackendSpec], actual: Mapping[str, BackendSpec]) -> Plan:
    """Diff the desired appproxy backends against the live set (any sources)."""
    for name, spec in desired.items():
        if spec.source != SOURCE or spec.name != name:
            raise ValueError(f"desired backend {name!r} is not an appproxy row")
    ours = {n: s for n, s in actual.items() if s.source == SOURCE}
    foreign = {n for n, s in actual.items() if s.source != SOURCE}
    add: list[BackendSpec] = []
    update: list[BackendSpec] = []
    conflicts: list[str] = []
    for name in sorted(desired):
        spec = desired[name]
        if name in foreign:
            conflicts.append(name)
        elif name not in ours:
            add.append(spec)
        elif ours[name] != spec:
            update.append(spec)
    remove = tuple(sorted(n for n in ours if n not in desired))
    return Plan(tuple(add), tuple(update), remove, tuple(conflicts))
