"""Writes of the ROUTER-mode mirror: pulls and router events (seed §9.4-9.9).

One apply path, shared with the legacy worker (reconcile.apply_locked):
circuits, publications, coordinator keys and the ``appproxy-*`` backends they
imply are written in ONE transaction under the per-authority reconcile lock
(``reconcile.reconcile_lock``), and the routing revision is bumped once when
anything changed; web processes recompile on the change notice.

Invariants:
- The desired backends are ``plan.desired(circuits, publications)``;
  in ROUTER mode no replica is asked for its model (names come from the
  publications).
- A pull fetches ``router-config`` inside the lock and the circuits just
  before it; a circuit some writer changed after that fetch (the change log
  says) is left as that writer left it, so an event applied meanwhile is
  never reverted by older data (router_pull_and_apply). It sends the last
  applied revision as ``known_revision`` (none after a (re)registration or a
  failed apply); 304 applies the circuits only and keeps publications and
  keys; 200 is a full set-diff and stores the new revision.
- Model events carry the full publication and apply directly; a key update
  carries only the id, so it re-pulls the snapshot (a secret never rides the
  bus); a key removal applies at once. Everything is idempotent, last writer
  wins.
- Operator keys are never touched (keys.coordinator only writes
  ``source=coordinator`` rows).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from typing import Any

import orjson
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from keys.coordinator import CoordinatorKey, clear_coordinator_keys, remove_coordinator_key, sync_coordinator_keys
from router.bulk import insert_rows
from router.core.backend import BackendSpec
from router.revision import (
    BACKEND,
    bump_revision,
    changes_since,
    current_revision,
    lock_revision,
    pending_names,
    touch,
)

from .. import pulls, reconcile
from ..backends import Plan
from ..backends import plan as plan_backends
from ..client import NOT_MODIFIED, CoordinatorError, client_for, parse_circuit_items
from ..models import CIRCUIT, PUBLICATION, WORKER, Circuit, Publication, WorkerState
from ..reconcile import (
    ApplyResult,
    Desire,
    actual_backends,
    apply_locked,
    mirrored_circuits,
    reconcile_lock,
    stored_circuit,
)
from ..wire import Circuit as WireCircuit
from . import metrics, pulled
from .config import weighting
from .plan import EndpointIndex, RouterPlan, desired, desired_backends, index, reindexed
from .wire import KeyRecordWire, RouterSnapshot, parse_snapshot
from .wire import Publication as WirePublication

log = logging.getLogger(__name__)

__all__ = [
    "apply_circuits",
    "apply_event",
    "apply_publication",
    "clear_router_mirror",
    "current_plan",
    "publications",
    "remove_key",
    "remove_publication",
    "router_circuit_desire",
    "router_pull_and_apply",
]


# authority → the publications as read at a revision, and their endpoint
# index. Every plan of a circuit reads them (an event's too): 2,000 rows
# validated were ~0.1 s of each route replace's time to routable, and the
# index over them ~20 ms more. The change log says which changed since
# (every publication write names its row: touch(PUBLICATION)); only those
# rows are read again and only their endpoints indexed again.
class _Read:
    __slots__ = ("_index", "by_model", "revision")

    def __init__(self, revision: int, by_model: dict[str, WirePublication], idx: EndpointIndex | None = None) -> None:
        self.revision, self.by_model, self._index = revision, by_model, idx

    @property
    def index(self) -> EndpointIndex:
        if self._index is None:
            self._index = index(self.by_model.values())
        return self._index

    def patched(self, revision: int, authority: str, names: set[str]) -> _Read:
        """This read with the publications `names` read again."""
        fresh = _read_publications(authority, names)
        by_model = {m: p for m, p in self.by_model.items() if m not in names}
        by_model.update(fresh)
        by_model = dict(sorted(by_model.items()))
        before = [self.by_model[m] for m in names if m in self.by_model]
        return _Read(revision, by_model, reindexed(self.index, before, by_model, names))


_publications: dict[str, _Read] = {}


def _current(authority: str) -> _Read:
    """The mirrored publications of the authority: those of the last read,
    with the ones the change log names since (or this transaction wrote)
    read again; all of them when the log cannot say. What this transaction
    wrote is read but never remembered (it may roll back)."""
    own = pending_names(PUBLICATION)  # None: it wrote rows it did not name
    current = current_revision()
    cached = _publications.get(authority)
    read = None
    if cached is not None:
        if cached.revision == current:
            read = cached
        else:
            changes = changes_since(cached.revision, current) if cached.revision < current else None
            if changes is not None:
                names = changes.get(PUBLICATION, set())
                if not names:
                    cached.revision = current
                    read = cached
                elif own is not None and not names & own:
                    read = cached.patched(current, authority, names)
    if own is None or (read is None and own):
        # (a writer calls this before its first write, so that this is rare)
        return _Read(0, _read_publications(authority))
    if read is None:
        read = _Read(current, _read_publications(authority))
    _publications[authority] = read
    return read.patched(0, authority, own) if own else read


def warm_publications(authority: str) -> None:
    """Bring this process's publication read up to the current revision
    outside any event (the events process, when idle): otherwise the first
    route event after a start read and indexed all 2,000 publications at
    full size, ~100–150 ms of its time to routable."""
    _current(authority)


def publications(authority: str) -> list[WirePublication]:
    """The mirrored publications of the authority, as wire objects, by primary name."""
    return list(_current(authority).by_model.values())


# What a stored publication validates to, by its stored content: a write
# remembers the publication it stored, so the read of the same transaction's
# plan (a first pull: 2,000 publications, ~0.4 s of validation) takes it
# back instead of validating every row again. Keyed by content, not by name,
# so a rolled-back write or a row changed elsewhere is simply a miss.
_validated: dict[bytes, WirePublication] = {}
_VALIDATED_KEPT = 20_000


def _stored(model: str, aliases: Any, mappings: Any, control_mode: Any) -> tuple[dict[str, Any], bytes | None]:
    """(the mapping a row's publication validates from, its memo key)."""
    data = {"model": model, "aliases": aliases or [], "mappings": mappings or [], "control_mode": control_mode}
    try:
        return data, orjson.dumps(data, option=orjson.OPT_SORT_KEYS)  # jsonb reorders keys
    except TypeError:  # not JSON-shaped: validated every time (and refused there)
        return data, None


def _remember(key: bytes | None, pub: WirePublication) -> None:
    if key is None:
        return
    if len(_validated) >= _VALIDATED_KEPT:
        _validated.clear()
    _validated[key] = pub


def _publication_of(row: Publication) -> WirePublication:
    data, key = _stored(row.model, row.aliases, row.mappings, row.control_mode)
    pub = _validated.get(key) if key is not None else None
    if pub is None:
        pub = WirePublication.model_validate(data)
        _remember(key, pub)
    return pub


def _read_publications(authority: str, names: Collection[str] | None = None) -> dict[str, WirePublication]:
    rows = Publication.objects.filter(authority=authority)
    if names is not None:
        rows = rows.filter(model__in=list(names))
    return {row.model: _publication_of(row) for row in rows.order_by("model")}


def router_circuit_desire(authority: str) -> Desire:
    """The ``desire`` reconcile.apply_locked plans with in ROUTER mode:
    circuits × the authority's publications, no model read."""
    rule = weighting()

    def desire(circuits: Iterable[WireCircuit], _models: Mapping[str, str]) -> dict[str, BackendSpec]:
        return desired_backends(circuits, _current(authority).index, rule)

    return Desire(desire)


def apply_circuits(settings, circuits: Iterable[WireCircuit], *, source: str, remove: Collection[str] = ()) -> ApplyResult:
    """A circuit event's apply (created / route_updated / removed): circuits
    join the publications; no replica is asked its model."""
    return reconcile.reconcile_apply(
        circuits, source=source, authority=settings.authority, remove=remove, desire=router_circuit_desire(settings.authority)
    )


def _coordinator_key(key: KeyRecordWire) -> CoordinatorKey:
    expires, ok = key.expiry()
    return CoordinatorKey(
        key_id=key.key_id,
        key_hash=key.token_hash,
        allowed_models=tuple(key.allowed_models),
        expires_at=expires,
        expiry_ok=ok,
        rate_limit=key.rate_limit,
        allowed_client_ips=tuple(key.allowed_client_ips),
        hint=key.display_hint,
    )


_UNREAD = object()


def _write_publication(
    authority: str, pub: WirePublication, revision: str = "", row: Any = _UNREAD, created: list | None = None
) -> bool:
    """Upsert one publication; `row`: its row as already read (None: none).
    A new row goes to `created` as its fields when given (the caller inserts
    them in one batch)."""
    data = pub.to_json()
    # pub is what its stored form validates to (to_json names every field)
    _remember(_stored(pub.model, data["aliases"], data["mappings"], data["control_mode"])[1], pub)
    if row is _UNREAD:
        row = Publication.objects.filter(authority=authority, model=pub.model).first()
    fields = {
        "aliases": data["aliases"],
        "mappings": data["mappings"],
        "control_mode": data["control_mode"],
    }
    if row is None:
        new = {"authority": authority, "model": pub.model, "revision": revision, **fields}
        if created is None:
            Publication.objects.create(**new)
        else:
            created.append(new)
        touch(PUBLICATION, pub.model)
        return True
    if all(getattr(row, k) == v for k, v in fields.items()):
        return False
    Publication.objects.filter(pk=row.pk).update(revision=revision or row.revision, **fields)
    touch(PUBLICATION, pub.model)
    return True


def _sync_publications(authority: str, snap: RouterSnapshot) -> bool:
    # A node serves one authority: rows of an earlier authority go.
    stale = Publication.objects.exclude(authority=authority)
    touch(PUBLICATION, *stale.values_list("model", flat=True))
    changed = bool(stale.delete()[0])
    incoming = {p.model for p in snap.publications}
    skipped = set(snap.skipped_models)
    # One read of them all (2,000 reads of one row each were ~1 s under the
    # reconcile lock on every 200 answer at full size).
    rows = {row.model: row for row in Publication.objects.filter(authority=authority)}
    gone = [m for m in rows if m not in incoming and m not in skipped]
    if gone:
        Publication.objects.filter(authority=authority, model__in=gone).delete()
        touch(PUBLICATION, *gone)
        changed = True
    created: list = []
    for pub in snap.publications:
        changed |= _write_publication(authority, pub, snap.revision or "", rows.get(pub.model), created)
    insert_rows(Publication, created)  # plain rows: bulk_create compiled each value
    return changed


def _apply_router(
    authority: str,
    *,
    source: str,
    circuits: Iterable[WireCircuit] = (),
    full_circuits: bool = False,
    remove: Iterable[str] = (),
    keep: Iterable[str] = (),
    pull_started=None,
    node_id: str = "",
    changed: bool = False,
    endpoints: Iterable[str] | None = None,
    keys_changed: bool = False,
    plan_all: bool = True,
    replan: Iterable[str] = (),
) -> ApplyResult:
    """Plan and apply; `changed`: publications changed — of `endpoints` only
    when given (only their circuits are planned again). `keys_changed`: the
    coordinator keys changed, which no plan reads: a revision bump is enough.
    `replan`: circuits to plan again whatever else changed (a pull's baseline
    found their backends not as planned)."""
    again = list(replan)
    if endpoints is not None:
        eps = sorted({str(e).lower() for e in endpoints})
        again += Circuit.objects.filter(endpoint_id__in=eps).values_list("circuit_id", flat=True)
    result = apply_locked(
        list(circuits),
        {},
        source=source,
        authority=authority,
        full=full_circuits,
        remove=set(remove),
        keep=set(keep),
        pull_started=pull_started,
        node_id=node_id,
        desire=router_circuit_desire(authority),
        extra_changed=changed,
        replan=again if endpoints is not None or again else None,
        plan_all=plan_all,
    )
    if keys_changed and result.revision is None:
        result = replace(result, revision=bump_revision(f"appproxy {source}"))
    return result


def _endpoints(mappings: Iterable[Any]) -> set[str]:
    """The endpoint ids of stored (dicts) or wire publication mappings."""
    out = set()
    for m in mappings or ():
        ep = m.get("endpoint_id") if isinstance(m, dict) else getattr(m, "endpoint_id", None)
        if ep:
            out.add(str(ep).lower())
    return out


def _fetch_snapshot(client, worker_id: str, known: str | None) -> RouterSnapshot | None:
    raw = client.router_config(worker_id, known)
    if raw is NOT_MODIFIED:
        return None
    try:
        snap = parse_snapshot(raw)
    except ValueError as exc:
        raise CoordinatorError(f"GET router-config: {exc}") from None
    for error in snap.errors:
        log.warning("appproxy_router: snapshot entry skipped: %s", error)
    return snap


def _apply_snapshot(authority: str, snap: RouterSnapshot) -> tuple[bool, bool]:
    """(publications changed, coordinator keys changed)."""
    _current(authority)  # brought up to date before the writes: a plan then reads only the rows they name
    published = _sync_publications(authority, snap)
    keys = sync_coordinator_keys((_coordinator_key(k) for k in snap.keys), full=True, keep=snap.skipped_keys)
    return published, keys


def _record_pull(authority: str, node_id: str, snap: RouterSnapshot | None) -> None:
    rows = WorkerState.objects.filter(authority=authority, node_id=node_id)
    if snap is None:
        rows.update(last_pull_result="304", pulls_unchanged=F("pulls_unchanged") + 1)
        transaction.on_commit(lambda: metrics.record_pull("304"))
    else:
        revision = snap.revision or ""
        rows.update(revision=revision, last_pull_result="200", pulls_full=F("pulls_full") + 1)
        touch(WORKER, node_id)
        def after_commit() -> None:
            metrics.record_pull("200")
            metrics.record_revision(revision)

        transaction.on_commit(after_commit)


def _forget_revision(authority: str, node_id: str) -> None:
    """Omit known_revision next time: the state may not match it."""
    WorkerState.objects.filter(authority=authority, node_id=node_id).update(revision="", last_pull_result="error")
    metrics.record_pull("error")
    metrics.record_revision("")


# (authority, node_id) → (digest of the circuits, routing revision) of the
# last full pull this process applied (one entry per node session it runs).
_pulled: dict[tuple[str, str], tuple[str, int]] = {}


# (authority, node_id) → when this process last compared the whole mirror
# (monotonic seconds). A pull in between compares only what can have changed
# (appproxy/router_mode/pulled.py); the whole comparison, which also heals any drift, runs
# on a process's first pull and every PLAN_ALL_EVERY seconds, outside the
# reconcile lock (_baseline): under it, it held every event ~1.6–2 s at 5,000
# circuits.
_planned_all: dict[tuple[str, str], float] = {}
PLAN_ALL_EVERY = 600.0
# (authority, node_id) → the circuits that pull applied, item by item (appproxy/router_mode/pulled.py).
_applied: dict[tuple[str, str], pulled.Applied] = {}
# (authority, node_id) → the weighting rule the memos above were planned
# with: a change of ``appproxy_router.weighting`` changes every weight while
# no circuit or publication changes, so it drops them (the next pull then
# compares the whole mirror and plans again every circuit that drifted).
_weighted: dict[tuple[str, str], str] = {}


def _unchanged_since(memo: tuple[str, int] | None, digest: str) -> bool:
    if memo is None or not digest or memo[0] != digest:
        return False
    changes = changes_since(memo[1], current_revision())
    return changes is not None and not changes.keys() & {CIRCUIT, PUBLICATION, BACKEND}


def _baseline(authority: str) -> tuple[pulled.Applied, set[str]] | None:
    """The whole comparison, done without the reconcile lock: every mirrored
    circuit's row digested (the memo a pull that applied the mirror as it
    stands would have left) and every circuit whose backends are not what
    planning it gives (drift) left out of it and named to plan again. As of
    the revision read first: whatever any writer commits after it, the change
    log names to the pull that uses the memo (pulled.Applied.delta). None when
    a mirrored backend's name names no circuit: only a comparison of
    everything under the lock can say what to do with it."""
    revision = current_revision()
    with transaction.atomic():  # one snapshot of rows and backends where the DB gives one
        rows = {row.circuit_id: row for row in Circuit.objects.only("circuit_id", "raw")}
        actual = actual_backends()
    mirror = mirrored_circuits(rows)
    diff = plan_backends(router_circuit_desire(authority).backends(list(mirror.values()), {}), actual)
    drifted = set()
    for name in (*(spec.name for spec in (*diff.add, *diff.update)), *diff.remove):
        cid = pulled.circuit_of(name)
        if cid is None:
            return None
        drifted.add(cid)
    digests = {cid: pulled.digest(row.raw) for cid, row in rows.items() if cid not in drifted}
    return pulled.Applied(revision, digests), drifted


def _late(changes: Mapping[str, set[str]]) -> set[str]:
    """The circuits a change set names (theirs, or one of their backends)."""
    return set(changes.get(CIRCUIT, ())) | {
        cid for name in changes.get(BACKEND, ()) if (cid := pulled.circuit_of(name)) is not None
    }


def router_pull_and_apply(
    settings, *, client, worker_id: str, node_id: str, lock_timeout: float = 30.0
) -> ApplyResult:
    """Circuits + router-config, applied as the full desired state (§9.4 step 3/5).

    The circuits answer is fetched, parsed and digested before the reconcile
    lock, and the whole comparison when one is due (_baseline): an event
    waits only for the writes. A circuit some writer changed after the fetch
    (the events process applied an event meanwhile: the change log says) is
    left as that writer left it, and compared again by the next pull — the
    answer may be older than the event, and an older state is never applied
    over a newer one. When the change log cannot say, or the pull must
    compare everything, the circuits are fetched again under the lock."""
    authority = settings.authority
    started = timezone.now()
    cpu0 = time.thread_time()
    memo = (authority, node_id)
    rule = weighting()
    if _weighted.get(memo) != rule:
        for memos in (_pulled, _applied, _planned_all):
            memos.pop(memo, None)
        _weighted[memo] = rule
    fetched_at = current_revision()
    body = client.circuit_body(worker_id)
    answer = None if _unchanged_since(_pulled.get(memo), body.digest) else _answer_of(body)
    base = _memo_for(authority, memo) if answer is not None else None
    with reconcile_lock(authority, blocking_timeout=lock_timeout):
        row = WorkerState.objects.filter(authority=authority, node_id=node_id).first()
        known = (row.revision or None) if row is not None else None
        try:
            snap = _fetch_snapshot(client, worker_id, known)
        except CoordinatorError:
            _forget_revision(authority, node_id)
            raise
        if snap is None and known is None:
            raise CoordinatorError("GET router-config: 304 without a known revision")
        if (
            snap is None and row is not None and row.first_pull_applied
            and _unchanged_since(_pulled.get(memo), body.digest)
        ):
            # Nothing changed: the same circuits as the pull this process last
            # applied, router-config 304, and no writer changed circuits,
            # publications or backends since (the change log says). Nothing is
            # parsed and nothing is written to the DB: the pull time that
            # schedules the next pull goes to Redis (appproxy.pulls), or to the
            # row when Redis is down. A requested pull clears its request.
            if pulls.note_unchanged(authority, node_id, (time.thread_time() - cpu0) * 1000):
                metrics.record_pull("304")
            else:
                with transaction.atomic():
                    _record_pull(authority, node_id, None)
                    WorkerState.objects.filter(pk=row.pk).update(last_pull_at=timezone.now())
            if row.pull_requested_at is not None:
                WorkerState.objects.filter(pk=row.pk, pull_requested_at__lte=started).update(pull_requested_at=None)
            return ApplyResult(plan=Plan())
        _pulled.pop(memo, None)
        if answer is None:  # it changed since the look before the lock
            answer, base = _answer_of(body), _memo_for(authority, memo)
        previous, replan, compared_all = base if base is not None else (None, set(), False)
        items, ids, digests = answer
        _applied.pop(memo, None)  # a failed apply leaves no memo behind
        try:
            with transaction.atomic():
                lock_revision()
                published, keys = _apply_snapshot(authority, snap) if snap is not None else (False, False)
                _record_pull(authority, node_id, snap)  # before the bump: it names the worker row
                # Only what can have changed since this process's last pull (or
                # the baseline's revision), minus what a writer changed after
                # the fetch; everything when the change log cannot say.
                now = current_revision()
                delta = previous.delta(ids, digests, now) if previous is not None and not published else None
                late_changes = changes_since(fetched_at, now)
                late = _late(late_changes) if late_changes is not None else set()
                if late_changes is None or (late_changes and delta is None):
                    # The change log cannot say what changed since the fetch, or
                    # the pull compares everything: the answer of now, under the lock.
                    body = client.circuit_body(worker_id)
                    items, ids, digests = _answer_of(body)
                    late = set()
                    if previous is not None and not published:
                        delta = previous.delta(ids, digests, now)
                elif delta is not None and late:
                    delta = pulled.Delta([i for i in delta.indices if ids[i] not in late], delta.gone - late)
                circuits, failed, errors = parse_circuit_items(
                    items if delta is None else [items[i] for i in delta.indices]
                )
                for error in errors:
                    log.warning("appproxy_router: pulled circuit skipped: %s", error)
                result = _apply_router(
                    authority,
                    source="pull",
                    circuits=circuits,
                    full_circuits=delta is None,
                    remove=delta.gone if delta is not None else (),
                    keep=failed,
                    pull_started=started,
                    node_id=node_id,
                    changed=published,
                    keys_changed=keys,
                    replan=replan - late if delta is not None else (),
                )
                applied_at = current_revision()  # ours: the revision row is locked until commit
        except Exception:
            _forget_revision(authority, node_id)
            raise
        if body.digest and not late:
            _pulled[memo] = (body.digest, applied_at)
        _applied[memo] = pulled.applied_after(previous, delta, ids, digests, {*failed, *late}, applied_at)
        if compared_all or delta is None:
            _planned_all[memo] = time.monotonic()
    pulls.note_cost(authority, node_id, (time.thread_time() - cpu0) * 1000)
    if snap is not None:
        log.info(
            "appproxy_router: pulled",
            extra={
                "revision": snap.revision,
                "publications": len(snap.publications),
                "keys": len(snap.keys),
                "changed": result.changed,
            },
        )
    return result


def _answer_of(body) -> tuple[list[Any], list[str | None], list[bytes | None]]:
    """The answer's items, their circuit ids and digests (pulled.digests_of)."""
    items = body.items()
    ids, digests = pulled.digests_of(items)
    return items, ids, digests


def _memo_for(authority: str, memo: tuple[str, str]) -> tuple[pulled.Applied | None, set[str], bool] | None:
    """(what to compare the answer against, circuits to plan again, whether
    that is a whole comparison): this process's last pull, or a baseline of
    the whole mirror when it has none or one is due; None when only a whole
    comparison under the lock will do."""
    previous = _applied.get(memo)
    last_all = _planned_all.get(memo)
    if previous is not None and last_all is not None and time.monotonic() - last_all < PLAN_ALL_EVERY:
        return previous, set(), False
    base = _baseline(authority)
    return None if base is None else (base[0], base[1], True)


def apply_publication(authority: str, pub: WirePublication, *, lock_timeout: float = 30.0) -> ApplyResult:
    """model_updated: upsert the full publication (by primary name)."""
    with reconcile_lock(authority, blocking_timeout=lock_timeout), transaction.atomic():
        lock_revision()
        _current(authority)  # brought up to date before the write: the plan then reads only this row
        before = Publication.objects.filter(authority=authority, model=pub.model).values_list("mappings", flat=True)
        endpoints = _endpoints(pub.mappings) | _endpoints(before.first() or ())
        changed = _write_publication(authority, pub)
        return _apply_router(authority, source="model_updated", changed=changed, endpoints=endpoints)


def remove_publication(authority: str, model: str, *, lock_timeout: float = 30.0) -> ApplyResult:
    """model_removed: the publication and all its aliases go."""
    with reconcile_lock(authority, blocking_timeout=lock_timeout), transaction.atomic():
        lock_revision()
        _current(authority)  # brought up to date before the write: the plan then reads only what it removed
        rows = Publication.objects.filter(authority=authority, model=model)
        endpoints = set().union(*(_endpoints(m) for m in rows.values_list("mappings", flat=True)))
        deleted, _ = rows.delete()
        touch(PUBLICATION, model)
        return _apply_router(authority, source="model_removed", changed=bool(deleted), endpoints=endpoints)


def remove_key(authority: str, key_id: str, *, lock_timeout: float = 30.0) -> ApplyResult:
    """key_removed: applied at once, no lookup."""
    with reconcile_lock(authority, blocking_timeout=lock_timeout), transaction.atomic():
        lock_revision()
        return _apply_router(authority, source="key_removed", keys_changed=remove_coordinator_key(key_id))


def refresh_keys(authority: str, *, client, worker_id: str, node_id: str, lock_timeout: float = 30.0) -> ApplyResult | None:
    """key_updated: re-pull the snapshot (the hash comes over authenticated
    REST, never the bus) and apply it; a key absent from it is removed."""
    with reconcile_lock(authority, blocking_timeout=lock_timeout):
        row = WorkerState.objects.filter(authority=authority, node_id=node_id).first()
        known = (row.revision or None) if row is not None else None
        snap = _fetch_snapshot(client, worker_id, known)
        if snap is None:
            if known is None:
                raise CoordinatorError("GET router-config: 304 without a known revision")
            return None  # nothing changed since our revision
        with transaction.atomic():
            lock_revision()
            published, keys = _apply_snapshot(authority, snap)
            _record_pull(authority, node_id, snap)  # before the bump: it names the worker row
            result = _apply_router(authority, source="key_updated", changed=published, keys_changed=keys)
    return result


def current_plan(authority: str) -> RouterPlan:
    """The plan of the whole mirror as it is now: what the writers, which
    plan only the circuits a change touches, must agree with
    (tests/router/test_incremental.py). No serving path calls it: /status
    and the dashboard read the snapshot and ``status.mirror_summary``
    (planning 5,000 circuits was ~0.4 s of a web process per read).

    The circuits are read and parsed one at a time: `desired` only folds them
    into the plan."""
    rows = Circuit.objects.only("circuit_id", "raw").order_by().iterator(chunk_size=500)
    return desired((c for c in map(stored_circuit, rows) if c is not None), publications(authority), weighting())


def clear_router_mirror() -> bool:
    """ROUTER mode was turned off: publications and coordinator keys go (the
    caller clears circuits and backends with reconcile.clear_mirror)."""
    with transaction.atomic():
        touch(PUBLICATION, *Publication.objects.values_list("model", flat=True))
        deleted, _ = Publication.objects.all().delete()
        keys = clear_coordinator_keys()
        if deleted or keys:
            bump_revision("appproxy_router disabled")
    return bool(deleted) or keys


def apply_event(ev: Any, s: Any, node_id: str) -> None:
    """One decoded ROUTER event (events.decode_router), in the events process."""
    if ev.name.endswith("model_updated_event"):
        apply_publication(s.authority, ev.publication)
    elif ev.name.endswith("model_removed_event"):
        remove_publication(s.authority, ev.ident)
    elif ev.name.endswith("key_removed_event"):
        remove_key(s.authority, ev.ident)
    else:  # key_updated: the hash comes from an authenticated re-pull
        row = WorkerState.objects.filter(authority=s.authority, node_id=node_id).first() if node_id else None
        if row is None or not row.worker_id:
            raise RuntimeError("not registered yet")
        with client_for(s) as client:
            refresh_keys(s.authority, client=client, worker_id=row.worker_id, node_id=node_id)
