"""ROUTER reconcile as a pure function: circuits × publications → backends (seed §9.6).

Exactly the seed's rule (the shipped, flattened composition):

    for each inference circuit with an endpoint_id:
        referencing = publications whose mappings name circuit.endpoint_id
        if none: tracked, no backends                       (pending circuit)
        models         = all names and aliases of every referencing publication
        endpoint_ratio = max(sanitize(ratio)) over every referencing mapping
        for each route (index i):
            composed = endpoint_ratio × sanitize(route.traffic_ratio)
            composed == 0 → no backend (drained)
            weight = clamp(round_half_up(100 × composed), 1, 1000)
            name   = appproxy-<circuit_id>-r<route_id | i>
            kind   = vllm if runtime_variant == "vllm" else openai_compat
            url    = http://{kernel_host | localhost}:{kernel_port}

- ``sanitize``: a non-finite (NaN, ±inf — ``1e400`` parses as inf) or
  negative ratio is 0, i.e. drained; never a traffic magnet.
- Rounding is half away from zero (Rust's ``f64::round``): 2.5 → 3.
- Joins are order-independent; a publication whose endpoints have no circuit
  here is *pending* and produces nothing; its names still resolve (listed,
  fallback, else 503) like an empty publication.
- Every published name and alias is listed (``published``), whether or not
  it has a backend.
- No I/O, no clocks, no Django: deterministic, ordered by name.

``weighting: hierarchical`` (refined BEP-1053; ``appproxy_router.weighting``)
replaces the flattened product by one normalised per level, each level over
its own children, so a model's endpoint split holds whatever the replica
counts:

    share(replica) = ratio(ep) / Σ ratio(the publication's endpoints)
                   × traffic_weight(group) / Σ traffic_weight(the circuit's non-empty groups)
                   × traffic_ratio(replica) / Σ traffic_ratio(its group's replicas)
    weight         = clamp(round_half_up(1000 × share), 1, 1000); share 0 → drained

- A route without a ``replica_group_id`` (or naming a group the circuit does
  not list) is in the circuit's implicit group, of traffic_weight 100.
- An empty group (no route with a traffic_ratio above 0) forfeits its share
  to the circuit's other groups: the endpoint's share of the model is kept.
- An endpoint mapped by several publications takes the largest of its
  normalised shares (the flattened rule's max, one level down).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from router.core.backend import BackendSpec

from ..backends import MAX_WEIGHT, MIN_WEIGHT, NAME_PREFIX, SOURCE, route_url
from ..wire import Circuit
from .wire import Publication

__all__ = [
    "FLAT",
    "HIERARCHICAL",
    "WEIGHTINGS",
    "EndpointIndex",
    "MirrorSummary",
    "RouterPlan",
    "composed_weight",
    "desired",
    "desired_backends",
    "hierarchical_weights",
    "index",
    "reindexed",
    "round_half_up",
    "sanitize",
    "summarize",
]


FLAT = "flat"
HIERARCHICAL = "hierarchical"
WEIGHTINGS = (FLAT, HIERARCHICAL)
# The weight of a whole model's traffic under the hierarchical rule: a share of
# 0.1 % is weight 1, the finest the [1, 1000] weight range can tell apart.
SHARE_SCALE = 1000
IMPLICIT_GROUP_WEIGHT = 100.0


def sanitize(ratio: object) -> float:
    """A coordinator ratio as a finite, non-negative float (else 0 = drained)."""
    if isinstance(ratio, bool):
        return 0.0
    try:
        value = float(ratio)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    if not math.isfinite(value) or value < 0:
        return 0.0
    return value


def round_half_up(x: float) -> int:
    """Round half away from zero for x ≥ 0 (Python's round() is half-to-even)."""
    return math.floor(x + 0.5)


def composed_weight(endpoint_ratio: float, traffic_ratio: float) -> int | None:
    """clamp(round_half_up(100 × composed), 1, 1000); None when drained (composed == 0)."""
    composed = sanitize(endpoint_ratio) * sanitize(traffic_ratio)
    if composed <= 0:
        return None
    scaled = 100.0 * composed
    if not math.isfinite(scaled) or scaled >= MAX_WEIGHT:
        return MAX_WEIGHT
    return max(MIN_WEIGHT, min(MAX_WEIGHT, round_half_up(scaled)))


@dataclass(frozen=True, slots=True)
class RouterPlan:
    backends: dict[str, BackendSpec]  # the desired appproxy-* backends, by name
    published: tuple[str, ...]  # every name and alias, sorted
    pending_circuits: tuple[str, ...]  # inference circuits no publication maps yet
    pending_publications: tuple[str, ...]  # publications with no backend here yet
    drained: tuple[str, ...]  # route backends not created because composed == 0


@dataclass(frozen=True, slots=True)
class EndpointIndex:
    """What the publications say of each endpoint: the max sanitised ratio
    over every mapping that names it, the names of every publication that
    maps it, and those publications (``members``), in the order of their
    primary names. Built once per set of publications (``index``) and
    patched for the ones that change (``reindexed``), so planning a few
    circuits costs what they cost, not what 2,000 publications do."""

    ratio_of: dict[str, float]
    names_of: dict[str, tuple[str, ...]]
    members: dict[str, tuple[str, ...]]
    # the largest normalised share of the endpoint in any publication that
    # maps it (the hierarchical rule's first level)
    share_of: dict[str, float]


def _shares(pub: Publication) -> dict[str, float]:
    """Each endpoint's share of the publication: its sanitised ratio over the
    sum of the publication's (an endpoint mapped twice counts once, at its
    largest ratio)."""
    ratios: dict[str, float] = {}
    for m in pub.mappings:
        ratios[m.endpoint_id] = max(ratios.get(m.endpoint_id, 0.0), sanitize(m.ratio))
    total = sum(ratios.values())
    return {ep: (r / total if total > 0 else 0.0) for ep, r in ratios.items()}


def index(publications: Iterable[Publication]) -> EndpointIndex:
    ratio_of: dict[str, float] = {}
    share_of: dict[str, float] = {}
    names_of: dict[str, dict[str, None]] = {}
    members: dict[str, dict[str, None]] = {}
    for pub in sorted(publications, key=lambda p: p.model):
        names = pub.names
        for ep, share in _shares(pub).items():
            share_of[ep] = max(share_of.get(ep, 0.0), share)
        for mapping in pub.mappings:
            ep = mapping.endpoint_id
            ratio_of[ep] = max(ratio_of.get(ep, 0.0), sanitize(mapping.ratio))
            members.setdefault(ep, {}).setdefault(pub.model, None)
            bucket = names_of.setdefault(ep, {})
            for name in names:
                bucket.setdefault(name, None)
    return EndpointIndex(
        ratio_of,
        {ep: tuple(names) for ep, names in names_of.items()},
        {ep: tuple(models) for ep, models in members.items()},
        share_of,
    )


def reindexed(
    idx: EndpointIndex, before: Iterable[Publication], after: Mapping[str, Publication], changed: Iterable[str]
) -> EndpointIndex:
    """`idx` with the publications `changed` (primary names) as they are in
    `after` (every publication now, by primary name; a name not in it is
    gone); `before`: their versions `idx` was built from. Only the endpoints
    either version maps are computed again; the result equals
    ``index(after.values())``."""
    changed = set(changed)
    if 2 * len(changed) >= len(after):
        # Most of them (a first pull writes every publication): a whole index
        # is cheaper than patching one.
        return index(after.values())
    # The changed publications' endpoints now, once each: a changed name per
    # endpoint looked up in every changed publication's mappings was
    # endpoints × changed steps (2,000 × 2,000 on a first pull, ~10 s).
    changed_at: dict[str, set[str]] = {}
    for name in changed:
        if name in after:
            for m in after[name].mappings:
                changed_at.setdefault(m.endpoint_id, set()).add(name)
    endpoints = {m.endpoint_id for pub in before for m in pub.mappings} | changed_at.keys()
    ratio_of, names_of, members = dict(idx.ratio_of), dict(idx.names_of), dict(idx.members)
    share_of = dict(idx.share_of)
    for ep in endpoints:
        now = {name for name in members.get(ep, ()) if name not in changed}
        now |= changed_at.get(ep, set())
        if not now:
            ratio_of.pop(ep, None)
            names_of.pop(ep, None)
            members.pop(ep, None)
            share_of.pop(ep, None)
            continue
        ordered = tuple(sorted(now))
        ratio = share = 0.0
        names: dict[str, None] = {}
        for name in ordered:
            pub = after[name]
            for mapping in pub.mappings:
                if mapping.endpoint_id == ep:
                    ratio = max(ratio, sanitize(mapping.ratio))
            share = max(share, _shares(pub).get(ep, 0.0))
            names.update(dict.fromkeys(pub.names))
        ratio_of[ep], names_of[ep], members[ep], share_of[ep] = ratio, tuple(names), ordered, share
    return EndpointIndex(ratio_of, names_of, members, share_of)


@dataclass(slots=True)
class _Planned:
    backends: dict[str, BackendSpec]
    pending_circuits: list[str]
    drained: list[str]
    served_endpoints: set[str]


def hierarchical_weights(endpoint_share: float, circuit: Circuit) -> list[int | None]:
    """Each route's weight under the hierarchical rule (None: drained), in
    route order, given the endpoint's share of its model."""
    declared = {g.id: sanitize(g.traffic_weight) for g in circuit.replica_groups}
    group_of = [r.replica_group_id if r.replica_group_id in declared else None for r in circuit.route_info]
    ratios = [sanitize(r.traffic_ratio) for r in circuit.route_info]
    within: dict[str | None, float] = {}
    for gid, ratio in zip(group_of, ratios, strict=True):
        within[gid] = within.get(gid, 0.0) + ratio
    weight_of = {gid: (declared[gid] if gid is not None else IMPLICIT_GROUP_WEIGHT) for gid in within}
    # An empty group (no live route) is not among the children: its share
    # goes to its siblings.
    groups_total = sum(w for gid, w in weight_of.items() if within[gid] > 0)
    out: list[int | None] = []
    for gid, ratio in zip(group_of, ratios, strict=True):
        share = 0.0
        if groups_total > 0 and within[gid] > 0:
            share = sanitize(endpoint_share) * (weight_of[gid] / groups_total) * (ratio / within[gid])
        out.append(None if share == 0 else min(MAX_WEIGHT, max(MIN_WEIGHT, round_half_up(SHARE_SCALE * share))))
    return out


def _plan(circuits: Iterable[Circuit], idx: EndpointIndex, weighting: str = FLAT) -> _Planned:
    out: dict[str, BackendSpec] = {}
    pending_circuits: list[str] = []
    drained: list[str] = []
    served_endpoints: set[str] = set()
    for circuit in circuits:
        if not circuit.is_inference or circuit.endpoint_id is None:
            continue
        ep = str(circuit.endpoint_id).lower()
        models = idx.names_of.get(ep)
        if models is None:
            pending_circuits.append(str(circuit.id))
            continue
        kind = "vllm" if circuit.runtime_variant == "vllm" else "openai_compat"
        if weighting == HIERARCHICAL:
            weights = hierarchical_weights(idx.share_of.get(ep, 0.0), circuit)
        else:
            weights = [composed_weight(idx.ratio_of[ep], r.traffic_ratio) for r in circuit.route_info]
        for i, route in enumerate(circuit.route_info):
            key = str(route.route_id) if route.route_id is not None else str(i)
            name = f"{NAME_PREFIX}{circuit.id}-r{key}"
            weight = weights[i]
            if weight is None:
                drained.append(name)
                continue
            served_endpoints.add(ep)
            out[name] = BackendSpec(
                name=name, url=route_url(route), kind=kind, models=models, weight=weight, source=SOURCE
            )
    return _Planned(out, pending_circuits, drained, served_endpoints)


def desired_backends(circuits: Iterable[Circuit], idx: EndpointIndex, weighting: str = FLAT) -> dict[str, BackendSpec]:
    """``desired(circuits, publications).backends``, given the publications' index."""
    return dict(sorted(_plan(circuits, idx, weighting).backends.items()))


def desired(circuits: Iterable[Circuit], publications: Iterable[Publication], weighting: str = FLAT) -> RouterPlan:
    pubs = list(publications)
    planned = _plan(circuits, index(pubs), weighting)
    served = planned.served_endpoints
    published = sorted({name for pub in pubs for name in pub.names})
    pending_pubs = sorted(pub.model for pub in pubs if not any(m.endpoint_id in served for m in pub.mappings))
    return RouterPlan(
        backends=dict(sorted(planned.backends.items())),
        published=tuple(published),
        pending_circuits=tuple(sorted(planned.pending_circuits)),
        pending_publications=tuple(pending_pubs),
        drained=tuple(sorted(planned.drained)),
    )


@dataclass(frozen=True, slots=True)
class MirrorSummary:
    """What ``desired`` says besides its backends, counted from stored
    columns instead of parsed circuits (``summarize``)."""

    pending_circuits: tuple[str, ...]
    pending_publications: tuple[str, ...]
    drained: int  # len(desired(...).drained)


def summarize(
    publications: Iterable[tuple[str, Any]],
    circuits: Iterable[tuple[Any, str, str, str]],
    routes: Iterable[tuple[Any, Any]],
) -> MirrorSummary:
    """The pending circuits and publications and the drained routes of
    ``desired``, by the same rule, from what the mirror stores of them:
    `publications` as (model, stored mappings), `circuits` as (key,
    circuit_id, endpoint_id, app_mode), `routes` as (their circuit's key,
    traffic_ratio).

    Nothing here parses a circuit or builds a backend: /status at cluster
    size (5,000 circuits, 20,000 routes) read every circuit's JSON and
    built the 20,000 backends a web process already routes to, ~0.4 s of
    its interpreter per read and ~45 MB of RSS it kept."""
    ratio_of: dict[str, float] = {}
    mapped_by: list[tuple[str, list[str]]] = []
    for model, mappings in publications:
        eps = []
        for m in mappings or ():
            ep = m.get("endpoint_id") if isinstance(m, dict) else None
            if isinstance(ep, str) and ep:
                ratio_of[ep] = max(ratio_of.get(ep, 0.0), sanitize(m.get("ratio", 1.0)))
                eps.append(ep)
        mapped_by.append((model, eps))
    endpoint_of: dict[Any, str] = {}
    pending: list[str] = []
    for key, cid, ep, app_mode in circuits:
        if app_mode != "inference" or not ep:
            continue
        ep = ep.lower()
        if ep in ratio_of:
            endpoint_of[key] = ep
        else:
            pending.append(cid)
    served: set[str] = set()
    drained = 0
    for key, traffic_ratio in routes:
        ep = endpoint_of.get(key)
        if ep is None:
            continue
        if composed_weight(ratio_of[ep], traffic_ratio) is None:
            drained += 1
        else:
            served.add(ep)
    return MirrorSummary(
        pending_circuits=tuple(sorted(pending)),
        pending_publications=tuple(sorted(model for model, eps in mapped_by if not any(ep in served for ep in eps))),
        drained=drained,
    )
