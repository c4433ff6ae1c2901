"""Applying coordinator events (reference §3.3) and remembering them.

Invariants:
- Dispatch is by name: created / route_updated / removed go through the
  active mode's ``apply_circuits`` (modes.of(settings): its plan, under the
  same lock and transaction as a pull, reconcile.apply_locked); every other
  name, including our own acks echoing back, is ignored.
- Events for another authority are ignored (a broadcast reaches every worker).
- Applying is idempotent full-state per circuit, so a duplicate or replayed
  event is harmless, and a later pull repairs a lost one.
- ``apply_event`` returns the circuits to acknowledge for ``created``: the
  complete objects exactly as received (the coordinator re-parses every
  field), only for circuits that were applied.
- ``record_event`` keeps the newest ``KEEP`` EventRecords.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from . import modes
from .envelope import CREATED, REMOVED, ROUTE_UPDATED, Event
from .models import EventRecord
from .reconcile import ApplyResult
from .wire import Circuit, RouteInfo, parse_circuits

log = logging.getLogger(__name__)

__all__ = ["APPLIED_EVENTS", "EventOutcome", "apply_event", "record_event", "record_events"]

APPLIED_EVENTS = frozenset({CREATED, ROUTE_UPDATED, REMOVED})
KEEP = 500
_PRUNE_EVERY = 50
_inserted = 0


class EventRejected(ValueError):
    """A known event whose circuits or routes do not validate."""


@dataclass(slots=True)
class EventOutcome:
    result: ApplyResult | None = None
    ack: list[dict[str, Any]] = field(default_factory=list)  # created only
    detail: str = ""


def routed_circuit(event: Event) -> Circuit:
    """The circuit of a route_updated event with its new route list. Raises EventRejected."""
    try:
        circuit = Circuit.model_validate(event.circuit)
        routes = [RouteInfo.model_validate(r) for r in event.routes or ()]
    except ValidationError as exc:
        raise EventRejected(f"route_updated does not validate ({exc.error_count()} error(s))") from None
    return circuit.with_routes(routes)


def apply_route_updates(circuits: list[Circuit], settings) -> EventOutcome:
    """One apply for the route_updated events that arrived back to back (a
    burst): each carries its circuit's whole route list, so for a circuit
    named twice the later one is the state."""
    last = {str(c.id): c for c in circuits}
    return EventOutcome(modes.of(settings).apply_circuits(settings, list(last.values()), source="route_updated"))


def apply_event(event: Event, settings) -> EventOutcome:
    """Apply one decoded event addressed to us. Raises EventRejected."""
    apply = modes.of(settings).apply_circuits
    if event.name == CREATED:
        circuits, errors = parse_circuits(event.circuits)
        if errors and not circuits:
            raise EventRejected("; ".join(errors))
        result = apply(settings, circuits, source="created")
        return EventOutcome(result, ack=[c.raw for c in circuits], detail="; ".join(errors))
    if event.name == ROUTE_UPDATED:
        return apply_route_updates([routed_circuit(event)], settings)
    if event.name == REMOVED:
        ids = [str(c.get("id")).lower() for c in event.circuits if c.get("id")]
        result = apply(settings, [], source="removed", remove=ids)
        return EventOutcome(result)
    raise EventRejected(f"not an applied event: {event.name}")


def record_event(
    *,
    name: str,
    fmt: str = "",
    authority: str | None = None,
    circuit_ids: list[str] | None = None,
    received_at: datetime,
    applied_at: datetime | None = None,
    acked_at: datetime | None = None,
    ok: bool | None = None,
    detail: str = "",
) -> None:
    """Insert one EventRecord (and now and then drop all but the newest)."""
    record_events([dict(name=name, fmt=fmt, authority=authority, circuit_ids=circuit_ids, received_at=received_at,
                        applied_at=applied_at, acked_at=acked_at, ok=ok, detail=detail)])


def record_events(events: list[dict[str, Any]]) -> None:
    """Insert EventRecords (record_event's fields each) in one statement: a
    batch of route updates is recorded in one commit, not one per event."""
    global _inserted
    if not events:
        return
    EventRecord.objects.bulk_create(
        EventRecord(
            name=e["name"][:100],
            fmt=e.get("fmt") or "",
            authority=(e.get("authority") or "")[:200],
            circuit_ids=list(e.get("circuit_ids") or [])[:50],
            received_at=e["received_at"],
            applied_at=e.get("applied_at"),
            acked_at=e.get("acked_at"),
            ok=e.get("ok"),
            detail=(e.get("detail") or "")[:2000],
        )
        for e in events
    )
    before, _inserted = _inserted, _inserted + len(events)
    if before // _PRUNE_EVERY != _inserted // _PRUNE_EVERY or before == 0:  # also on a process's first insert
        cutoff = EventRecord.objects.order_by("-pk").values_list("pk", flat=True)[KEEP : KEEP + 1]
        first = list(cutoff)
        if first:
            EventRecord.objects.filter(pk__lte=first[0]).delete()
