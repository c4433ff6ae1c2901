"""Reads of the AppProxy mirror (off the hot path).

``compile_ingress`` is called by ``router.selectors.compile_snapshot`` in
every web process whenever the routing revision changes; it returns None
when the ``appproxy`` section is absent or disabled.
"""

from __future__ import annotations

from typing import Any

from .. import node
from ..models import Circuit, WorkerState
from ..reconcile import stored_circuit
from ..wire import Circuit as WireCircuit
from .config import parse_section
from .ingress import Ingress
from .plan import confinement, ingress_table

__all__ = ["compile_ingress", "mirror_circuits"]


def mirror_circuits() -> tuple[list[WireCircuit], dict[str, str]]:
    """The mirrored circuits (as wire objects) and model_key → model."""
    circuits: list[WireCircuit] = []
    models: dict[str, str] = {}
    for row in Circuit.objects.only("raw", "model", "circuit_id", "endpoint_id"):
        parsed = stored_circuit(row)
        if parsed is None:
            continue  # one odd row never breaks every snapshot compile
        circuits.append(parsed)
        if row.model:
            models[row.model_key] = row.model
    return circuits, models


def compile_ingress(cfg: Any) -> Ingress | None:
    settings = parse_section(getattr(cfg, "appproxy", None))
    if settings is None or not settings.enabled:
        return None
    circuits, models = mirror_circuits()
    state = WorkerState.objects.filter(authority=settings.authority, node_id=node.current()).first()
    confined, confined_models = confinement(circuits, models)
    return Ingress(
        domain=settings.wildcard_domain,
        aggregate_hosts=frozenset({settings.apex, *settings.aggregation_hosts}),
        table=ingress_table(circuits, models),
        jwt_secret=settings.jwt_secret,
        confined=confined,
        confined_models=confined_models,
        authority=settings.authority,
        worker_id=state.worker_id if state else "",
        registered=bool(state and state.worker_id),
        first_pull_applied=bool(state and state.first_pull_applied),
    )
