"""Writes to the AppProxy mirror: the one apply path for pulls and events of
every mode (each mode's plan comes in as a ``Desire``).

Invariants (seed §5.3, SPEC LEG-2/3/4, CORE-2/8):
- Every write happens under ONE Redis lock per authority (``reconcile_lock``)
  and in ONE DB transaction that upserts Circuit/Route rows, rewrites the
  ``source=appproxy`` Backend rows the pure plan asks for, and bumps the
  routing revision (the change notice goes out after commit). Pulls and
  events therefore never interleave.
- Only ``source=appproxy`` Backend rows are ever added, updated or removed; a
  desired name owned by another source is a logged conflict, never applied.
- Applying is idempotent full-state per circuit: the same input twice
  changes nothing and does not bump the revision.
- A pull is a full set (circuits it does not list are removed, except items
  the coordinator sent but we could not parse); it is fetched inside the
  lock, so an event applied before it is never undone by older data.
- A mode that plans by discovered models discovers them before the
  transaction (and before the lock for events); a circuit whose model is
  unknown stays mirrored with no backends.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings as django_settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from pydantic import ValidationError

from router.bulk import BATCH, insert_rows
from router.core.backend import BackendSpec
from router.models import Backend, Source
from router.redis import sync_client
from router.revision import BACKEND, bump_revision, lock_revision, touch

from .backends import NAME_PREFIX, SOURCE, Plan, backend_name, plan
from .models import CIRCUIT, WORKER, Circuit, Route, WorkerState
from .wire import Circuit as WireCircuit

log = logging.getLogger(__name__)

__all__ = [
    "ApplyResult",
    "Desire",
    "actual_backends",
    "apply_locked",
    "clear_mirror",
    "known_models",
    "mirrored_circuits",
    "reconcile_apply",
    "reconcile_lock",
    "stored_circuit",
]

LOCK_TTL = 60.0  # a crashed holder releases the lock after this
LOCK_POLL = 0.01  # while another process holds it, try again this often (redis-py's default: 0.1 s)


def reconcile_lock(authority: str, *, blocking_timeout: float = 30.0):
    """The per-authority mutex shared by every process of this node.

    A waiter (an event while a pull applies) tries again every 10 ms, not
    redis-py's 100 ms: the wait was up to 100 ms of an event's time to
    routable on top of the holder's own work. Only a contended lock polls."""
    name = f"{django_settings.ROUTER_REDIS_PREFIX}appproxy:reconcile:{authority}"
    return sync_client().lock(
        name, timeout=LOCK_TTL, sleep=LOCK_POLL, blocking_timeout=blocking_timeout, thread_local=False
    )


@dataclass(frozen=True, slots=True)
class ApplyResult:
    plan: Plan
    upserted: tuple[str, ...] = ()  # circuit ids whose row changed
    deleted: tuple[str, ...] = ()  # circuit ids removed from the mirror
    revision: int | None = None  # set when the revision was bumped

    @property
    def changed(self) -> bool:
        return self.revision is not None


@dataclass(frozen=True, slots=True)
class Desire:
    """A mode's plan as the apply path calls it: ``backends(circuits, models)``
    gives the ``appproxy-*`` backends the circuits call for, ``models`` being
    model_key → model (what discovery found, for a mode that plans by it).

    ``by_model``: the mode plans by discovered models, so the plan of a few
    circuits (an event) starts from every model the mirror knows.
    ``forget``: given the model keys of the circuits an apply removed (the
    mode's own cache of them)."""

    backends: Callable[[Iterable[WireCircuit], Mapping[str, str]], dict[str, BackendSpec]]
    by_model: bool = False
    forget: Callable[[Iterable[str]], None] | None = None


# What clear_mirror plans: nothing (it removes every circuit).
_NOTHING = Desire(lambda _circuits, _models: {})


def known_models() -> dict[str, str]:
    """model_key → model from the mirror (the durable discovery cache)."""
    out: dict[str, str] = {}
    for circuit_id, endpoint_id, model in Circuit.objects.exclude(model="").values_list(
        "circuit_id", "endpoint_id", "model"
    ):
        out[endpoint_id or circuit_id] = model
    return out


SCOPE_IN_SQL = 64  # circuits whose backends actual_backends() selects in SQL; beyond, it filters the rows itself


def _prefixed(prefix: str) -> Q:
    """Names that start with `prefix` (which ends in "-"). SQLite's LIKE is
    case-insensitive, so it cannot use the name index: one circuit's
    backends cost a scan of every backend (~3 ms at 20,000, a fifth of an
    event's apply). Its BINARY collation orders by code point, so the range
    [prefix, prefix with "-" → ".") is exactly the names with the prefix, and
    an index seek. Other databases' collations need not order that way:
    LIKE there."""
    if connection.vendor == "sqlite":
        return Q(name__gte=prefix, name__lt=prefix[:-1] + ".")
    return Q(name__startswith=prefix)


def actual_backends(circuit_ids: Collection[str] | None = None, names: Collection[str] = ()) -> dict[str, BackendSpec]:
    """Every Backend row, as the plan compares them (ours fully, others by name);
    with `circuit_ids`, only the backends of those circuits and `names`."""
    out: dict[str, BackendSpec] = {}
    rows = Backend.objects.all()
    wanted: set[str] | None = None
    if circuit_ids is not None and len(circuit_ids) > SCOPE_IN_SQL:
        # Many circuits (a pull that found most of the mirror new): one
        # `name LIKE …` per circuit made a query of thousands of ORs that
        # SQLite took tens of seconds over; the names are matched here instead.
        wanted = set(circuit_ids)
        named = set(names)
        rows = rows.filter(Q(name__in=list(named)) | Q(name__startswith=NAME_PREFIX))
    elif circuit_ids is not None:
        scope = Q(name__in=list(names))
        for cid in circuit_ids:
            scope |= _prefixed(f"{NAME_PREFIX}{cid}-")
        rows = rows.filter(scope)
    start, end = len(NAME_PREFIX), len(NAME_PREFIX) + 36
    for name, source, url, kind, models, weight in rows.values_list(
        "name", "source", "url", "kind", "models", "weight"
    ):
        if wanted is not None and name not in named and not (
            name.startswith(NAME_PREFIX) and name[start:end] in wanted and name[end : end + 1] == "-"
        ):
            continue
        if source == SOURCE:
            out[name] = BackendSpec(
                name=name, url=url, kind=kind, models=tuple(models or ()), weight=weight, source=SOURCE
            )
        else:
            out[name] = BackendSpec(name=name, url=url, source=source)
    return out


# Mirrored circuits as parsed by this process, by circuit id: an apply parses
# only the rows that changed since (thousands of circuits per pull or event).
_parsed: dict[str, WireCircuit] = {}


def mirrored_circuits(rows: Mapping[str, Any]) -> dict[str, WireCircuit]:
    """The given Circuit rows (circuit id → row) as wire objects, the ones that
    still parse; a row unchanged since this process last parsed it is not
    parsed again."""
    out: dict[str, WireCircuit] = {}
    for cid, row in rows.items():
        cached = _parsed.get(cid)
        parsed = cached if cached is not None and cached.same_raw(row.raw) else stored_circuit(row)
        if parsed is not None:
            out[cid] = parsed
    _parsed.clear()
    _parsed.update(out)
    return out


def stored_circuit(row) -> WireCircuit | None:
    """A mirrored circuit as a wire object; None (logged) if it no longer parses."""
    try:
        return WireCircuit.model_validate(row.raw)
    except ValidationError as exc:
        log.warning(
            "appproxy: mirrored circuit %s does not parse (%s errors); ignored", row.circuit_id, exc.error_count()
        )
        return None


# Rows per INSERT of the circuits' batched write (a first pull adds 5,000;
# one INSERT per row was a large part of a first boot's apply), as backends
# and routes (20,000 each) through router.bulk.insert_rows.
WRITE_BATCH = BATCH


def _write_plan(p: Plan, now) -> None:
    insert_rows(
        Backend,
        (
            {
                "name": spec.name,
                "source": Source.APPPROXY,
                "url": spec.url,
                "kind": spec.kind,
                "models": list(spec.models),
                "weight": spec.weight,
                "updated_at": now,
            }
            for spec in p.add
        ),
    )
    for spec in p.update:
        Backend.objects.filter(name=spec.name, source=Source.APPPROXY).update(
            url=spec.url, kind=spec.kind, models=list(spec.models), weight=spec.weight, updated_at=now
        )
    if p.remove:
        Backend.objects.filter(source=Source.APPPROXY, name__in=list(p.remove)).delete()
    touch(BACKEND, *(s.name for s in (*p.add, *p.update)), *p.remove)
    if p.conflicts:
        log.warning("appproxy: backend names owned by another source were not applied: %s", list(p.conflicts))


def _yielded(circuit: WireCircuit, route: Any, desired: Mapping[str, BackendSpec]) -> str:
    """The backend a route row names: its backend when the plan has one, else ''."""
    name = backend_name(circuit, route)
    return name if name in desired else ""


def _write_circuits(
    rows: Mapping[str, Any],
    upserted: Iterable[str],
    incoming: Mapping[str, WireCircuit],
    model_of: Mapping[str, str],
    desired: Mapping[str, BackendSpec],
    now,
) -> None:
    """Each upserted circuit's row and its route rows. A changed row is saved
    on its own (an event: one or a few); new rows and every route row go in
    batched INSERTs (router.bulk.insert_rows; bulk_create compiled every value
    of every row, half of a first pull's CPU), the replaced routes out in one
    DELETE."""
    created: dict[str, dict[str, Any]] = {}
    saved: list[Circuit] = []
    routed: list[tuple[Circuit | str, WireCircuit]] = []  # the row, or a new row's circuit_id
    for cid in upserted:
        circuit, model, row = incoming[cid], model_of[cid], rows.get(cid)
        fields: dict[str, Any] = {
            "subdomain": circuit.subdomain or "",
            "app": circuit.app,
            "app_mode": circuit.app_mode,
            "model": model,
            "endpoint_id": str(circuit.endpoint_id or ""),
            "open_to_public": circuit.open_to_public,
            "allowed_client_ips": circuit.allowed_client_ips,
            "runtime_variant": circuit.runtime_variant or "",
        }
        if model and (row is None or row.model != model):
            fields["model_discovered_at"] = now
        if row is None:
            key = str(circuit.id)
            created[key] = {"circuit_id": key, "raw": circuit.raw_to_store(), **fields}
            routed.append((key, circuit))
        else:
            for name, value in fields.items():
                setattr(row, name, value)
            row.raw = circuit.raw
            row.save()
            saved.append(row)
            routed.append((row, circuit))
    for i in range(0, len(saved), WRITE_BATCH):
        Route.objects.filter(circuit__in=[row.pk for row in saved[i : i + WRITE_BATCH]]).delete()
    insert_rows(Circuit, created.values())
    pks: dict[str, int] = {}
    new = list(created)
    for i in range(0, len(new), WRITE_BATCH):
        pks.update(Circuit.objects.filter(circuit_id__in=new[i : i + WRITE_BATCH]).values_list("circuit_id", "pk"))
    insert_rows(
        Route,
        (
            {
                "circuit_id": pks[row] if isinstance(row, str) else row.pk,
                "route_id": str(route.route_id or ""),
                "session_id": str(route.session_id),
                "session_name": route.session_name or "",
                "kernel_host": route.kernel_host or "",
                "kernel_port": route.kernel_port,
                "protocol": route.protocol,
                "traffic_ratio": route.traffic_ratio,
                "backend_name": _yielded(circuit, route, desired),
            }
            for row, circuit in routed
            for route in circuit.route_info
        ),
    )


def _rename_routes(planned: Iterable[WireCircuit], written: Collection[str],
                   desired: Mapping[str, BackendSpec]) -> None:
    """The backend each route row names, for circuits planned again but not
    rewritten (`_write_circuits` wrote the others): a change elsewhere (a
    ROUTER publication mapping their endpoint, or no longer mapping it) gives
    or takes their routes' backends, and a route row must say which. Only the
    rows whose name changes are written."""
    expected: dict[tuple[str, str, str], str] = {}
    for circuit in planned:
        cid = str(circuit.id)
        if cid in written:
            continue
        for route in circuit.route_info:
            expected[(cid, str(route.route_id or ""), str(route.session_id))] = _yielded(circuit, route, desired)
    if not expected:
        return
    cids = sorted({cid for cid, _, _ in expected})
    stale: list[Route] = []
    for i in range(0, len(cids), WRITE_BATCH):
        rows = Route.objects.filter(circuit__circuit_id__in=cids[i : i + WRITE_BATCH]).values_list(
            "pk", "circuit__circuit_id", "route_id", "session_id", "backend_name"
        )
        for pk, cid, route_id, session_id, current in rows:
            want = expected.get((cid, route_id, session_id))
            if want is not None and want != current:
                stale.append(Route(pk=pk, backend_name=want))
    if stale:
        Route.objects.bulk_update(stale, ["backend_name"], batch_size=WRITE_BATCH)


def apply_locked(  # the caller holds reconcile_lock
    circuits: Iterable[WireCircuit],
    models: Mapping[str, str],
    *,
    source: str,
    authority: str | None,
    full: bool = False,
    remove: Collection[str] = (),
    keep: Collection[str] = (),
    pull_started: datetime | None = None,
    node_id: str = "",
    desire: Desire,
    extra_changed: bool = False,
    replan: Collection[str] | None = None,
    plan_all: bool = True,
) -> ApplyResult:
    """`desire`: the mode's plan of the circuits (Desire).

    `extra_changed`: an input of the plan other than circuits changed (the
    publications); every circuit is planned again, or only the mirrored
    circuits `replan` names when the caller knows which it affects. `replan`
    alone (a pull's comparison found those circuits' backends not as planned)
    plans them again too.

    `plan_all=False` (a full pull whose only news is in the circuits): the
    whole set is still compared row by row to find what changed, but only
    the changed and removed circuits' backends are planned and compared, as
    for an event — a circuit's backends depend only on itself and the
    publications. At 5,000 circuits that is ~0.3 s under the reconcile lock
    instead of ~1.6 s (docs/performance.md); a pull with `plan_all=True`
    (the default, and what the callers use now and then) compares every
    backend and so heals any drift."""
    now = timezone.now()
    incoming = {str(c.id): c for c in circuits}
    with transaction.atomic():
        lock_revision()  # nodes sharing one PostgreSQL apply one at a time
        removing = {str(i).lower() for i in remove}
        replanning = set(replan or ())
        read_all = full or (extra_changed and replan is None)  # else only the named circuits' rows are read
        whole = read_all and (plan_all or extra_changed)  # every circuit is planned and every backend compared
        rows_qs = (
            Circuit.objects.all() if read_all else Circuit.objects.filter(circuit_id__in=[*incoming, *removing, *replanning])
        )
        rows = {row.circuit_id: row for row in rows_qs}
        gone = removing & rows.keys()
        if full:
            gone |= rows.keys() - incoming.keys() - set(keep)
        gone -= incoming.keys()

        # Each incoming circuit's model, and the ones that differ from their row.
        model_of = {
            cid: models.get(c.model_key) or (rows[cid].model if cid in rows else "") for cid, c in incoming.items()
        }
        upserted = [
            cid for cid, c in incoming.items()
            if cid not in rows or not c.same_raw(rows[cid].raw) or rows[cid].model != model_of[cid]
        ]
        p = Plan()
        mirror_size = (
            len(rows.keys() - gone | incoming.keys())
            if read_all
            else Circuit.objects.count() - len(gone) + len(incoming.keys() - rows.keys())
        )
        if upserted or gone or extra_changed or replanning:
            scope: set[str] | None = None
            if whole:
                # The whole mirror after this apply, and each circuit's model.
                kept = {cid: row for cid, row in rows.items() if cid not in gone and cid not in incoming}
                mirror = mirrored_circuits(kept)
                models_now = {cid: kept[cid].model for cid in mirror}
                mirror.update(incoming)
                models_now.update(model_of)  # an incoming circuit's model wins a model_key it shares
                by_key = {mirror[cid].model_key: m for cid, m in models_now.items() if m}
                planned = list(mirror.values())
            else:
                # An event about a few circuits: a circuit's backends depend only
                # on itself (and the publications, unchanged here), so only
                # theirs are planned and compared, not the whole mirror's.
                again = [
                    c for cid in sorted(replanning - incoming.keys() - gone) if cid in rows
                    if (c := stored_circuit(rows[cid])) is not None
                ]
                # (a circuit named in `replan` without a row: its backends are
                # compared too, so any left over are removed)
                scope = {*upserted, *gone, *(str(c.id) for c in again), *replanning}
                by_key = known_models() if desire.by_model else {}  # a plan that reads no models gets none
                by_key.update((incoming[cid].model_key, m) for cid, m in model_of.items() if m)
                as_sent = [incoming[cid] for cid in sorted(replanning & incoming.keys() - set(upserted))]
                planned = [*(incoming[cid] for cid in upserted), *as_sent, *again]
            desired = desire.backends(planned, by_key)
            _write_circuits(rows, upserted, incoming, model_of, desired, now)
            _rename_routes(planned, set(upserted), desired)
            touch(CIRCUIT, *upserted, *gone)
            if gone:
                Circuit.objects.filter(circuit_id__in=list(gone)).delete()
                if desire.forget is not None:
                    desire.forget(rows[cid].model_key for cid in gone)
            p = plan(desired, actual_backends(scope, desired.keys()))
            _write_plan(p, now)

        flipped = False
        if authority is not None:
            # Field-wise updates: the heartbeat writes the same row concurrently.
            # Other nodes sharing the DB see the mirror change through the revision.
            # (updated_at is left alone: it is each node's own liveness, see worker._prune)
            WorkerState.objects.filter(authority=authority).exclude(circuits=mirror_size).update(circuits=mirror_size)
            if pull_started is not None and node_id:  # this node's full pull: it may become ready
                state, _ = WorkerState.objects.get_or_create(authority=authority, node_id=node_id)
                rows_of = WorkerState.objects.filter(pk=state.pk)
                flipped = not state.first_pull_applied
                if flipped:
                    touch(WORKER, node_id)
                rows_of.update(first_pull_applied=True, last_pull_at=now)
                rows_of.filter(pull_requested_at__lte=pull_started).update(pull_requested_at=None)

        revision = None
        if upserted or gone or p or flipped or extra_changed:
            revision = bump_revision(f"appproxy {source}")
    if revision is not None:
        log.info(
            "appproxy: applied",
            extra={
                "source": source,
                "circuits": mirror_size,
                "upserted": len(upserted),
                "deleted": len(gone),
                "backends_added": len(p.add),
                "backends_updated": len(p.update),
                "backends_removed": len(p.remove),
                "revision": revision,
            },
        )
    return ApplyResult(plan=p, upserted=tuple(upserted), deleted=tuple(sorted(gone)), revision=revision)


def reconcile_apply(
    circuits: Iterable[WireCircuit],
    *,
    source: str,
    authority: str,
    desire: Desire,
    models: Mapping[str, str] | None = None,
    full: bool = False,
    remove: Collection[str] = (),
    lock_timeout: float = 30.0,
) -> ApplyResult:
    """Apply circuits (and removals) to the mirror under the reconcile lock.

    ``full=True`` makes ``circuits`` the complete set (a pull); otherwise they
    are upserted one by one (created / route_updated) and ``remove`` names
    circuit ids to drop (removed). ``models``: model_key → model, for a
    ``desire`` that plans by them (found before the lock).
    """
    circuits = list(circuits)
    with reconcile_lock(authority, blocking_timeout=lock_timeout):
        return apply_locked(
            circuits, models or {}, source=source, authority=authority, full=full, remove=remove, desire=desire
        )


def clear_mirror() -> ApplyResult | None:
    """Drop every mirrored circuit and appproxy backend (the worker was
    disabled or its section removed). None when there was nothing to drop."""
    if not Circuit.objects.exists() and not Backend.objects.filter(source=Source.APPPROXY).exists():
        return None
    with reconcile_lock("(disabled)"):
        return apply_locked([], {}, source="disabled", authority=None, full=True, desire=_NOTHING)
