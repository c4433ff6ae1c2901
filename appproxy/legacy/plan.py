"""The legacy worker's plan, pure: circuits and their discovered models →
the backends they call for (``backends.plan`` diffs them against the live
set), and the Host ingress table.

Invariants (seed §5.3, SPEC LEG-3, CORE-2):
- One backend per usable route: name ``appproxy-<circuit_id>-r<route_key>``
  (route_key = route_id, else session_id), url
  ``http://{kernel_host or localhost}:{kernel_port}``, kind ``vllm`` when the
  circuit's runtime_variant is ``vllm`` else ``openai_compat``, models = the
  discovered model name, source ``appproxy``.
- weight = clamp(round(100 * traffic_ratio), 1, 1000); a ratio that is ≤ 0,
  NaN or infinite-negative drops the route (no backend), +inf saturates at 1000.
- A circuit whose model is not known yet yields no backends (nothing could
  match a request for it); the next reconcile after discovery adds them.
- A circuit with access rules of its own (``open_to_public: false``, or an
  ``allowed_client_ips`` list) is *confined*: its replicas are reachable
  through its own Host only, where those rules are checked (``confinement``).
- No I/O, no clocks, no Django: deterministic and ordered by name.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from router.core.backend import BackendSpec
from router.core.ipnets import Network, parse_comma_list

from ..backends import MAX_WEIGHT, MIN_WEIGHT, SOURCE, backend_name, circuit_scope, route_url
from ..wire import Circuit

__all__ = [
    "IngressEntry",
    "confinement",
    "desired_backends",
    "ingress_table",
    "weight_from_ratio",
]


def weight_from_ratio(ratio: float) -> int | None:
    """clamp(round(100 * ratio), 1, 1000); None when the route must be skipped."""
    try:
        value = float(ratio)
    except (TypeError, ValueError):
        return None
    if math.isnan(value) or value <= 0:
        return None
    scaled = 100.0 * value
    if not math.isfinite(scaled) or scaled >= MAX_WEIGHT:
        return MAX_WEIGHT
    return max(MIN_WEIGHT, min(MAX_WEIGHT, round(scaled)))


def _model_for(circuit: Circuit, models: Mapping[str, str], default_model: str | None) -> str | None:
    return models.get(circuit.model_key) or default_model


def desired_backends(
    circuits: Iterable[Circuit],
    models: Mapping[str, str],
    *,
    default_model: str | None = None,
) -> dict[str, BackendSpec]:
    """The appproxy backends the given circuits call for.

    ``models`` maps ``Circuit.model_key`` (endpoint_id, else circuit id) to the
    model name the replica reported on ``/v1/models``. Non-inference circuits
    are skipped.
    """
    out: dict[str, BackendSpec] = {}
    for circuit in circuits:
        if not circuit.is_inference:
            continue
        model = _model_for(circuit, models, default_model)
        if not model:
            continue
        kind = "vllm" if circuit.runtime_variant == "vllm" else "openai_compat"
        for route in circuit.route_info:
            weight = weight_from_ratio(route.traffic_ratio)
            if weight is None:
                continue
            name = backend_name(circuit, route)
            out[name] = BackendSpec(
                name=name,
                url=route_url(route),
                kind=kind,
                models=(model,),
                weight=weight,
                source=SOURCE,
            )
    return dict(sorted(out.items()))


@dataclass(frozen=True, slots=True)
class IngressEntry:
    circuit_id: str
    model: str | None  # None until a replica has reported its model
    open_to_public: bool
    allowed_ips: tuple[Network, ...]  # empty = unrestricted
    has_routes: bool  # at least one route that yields a backend
    endpoint_id: str | None = None


def ingress_table(
    circuits: Iterable[Circuit],
    models: Mapping[str, str],
    *,
    default_model: str | None = None,
) -> dict[str, IngressEntry]:
    """Lower-cased subdomain → entry, for inference circuits with a subdomain."""
    table: dict[str, IngressEntry] = {}
    for circuit in circuits:
        if not circuit.is_inference or not circuit.subdomain:
            continue
        table[circuit.subdomain.lower()] = IngressEntry(
            circuit_id=str(circuit.id),
            model=_model_for(circuit, models, default_model),
            open_to_public=circuit.open_to_public,
            allowed_ips=parse_comma_list(circuit.allowed_client_ips),
            has_routes=any(weight_from_ratio(r.traffic_ratio) is not None for r in circuit.route_info),
            endpoint_id=str(circuit.endpoint_id) if circuit.endpoint_id else None,
        )
    return table


def confinement(
    circuits: Iterable[Circuit],
    models: Mapping[str, str],
    *,
    default_model: str | None = None,
) -> tuple[frozenset[str], frozenset[str]]:
    """(scopes, models) of the confined inference circuits: the backend-name
    prefixes (``circuit_scope``) of circuits that are private or have an IP
    list, and the model names they serve. Only their own Host checks those
    rules, so no other Host may select, know or list their replicas; a circuit
    without a subdomain (no Host at all) is confined just the same."""
    scopes: set[str] = set()
    names: set[str] = set()
    for circuit in circuits:
        if not circuit.is_inference:
            continue
        if circuit.open_to_public and not parse_comma_list(circuit.allowed_client_ips):
            continue
        scopes.add(circuit_scope(str(circuit.id)))
        model = _model_for(circuit, models, default_model)
        if model:
            names.add(model)
    return frozenset(scopes), frozenset(names)
