"""Writes of the legacy worker's mirror: its plan (``DESIRE``) and the model
discovery before each apply, through the shared apply path
(appproxy/reconcile.py).

Invariants:
- A circuit's backends come from ``plan.desired_backends``: each needs the
  model a replica reports on ``/v1/models`` (discovery), found before the
  reconcile lock for events and inside it for a pull, never inside the
  transaction.
- A pull is the full set (``pull_and_apply``); marking the first pull as
  applied makes the node ready (/readyz).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable

from django.utils import timezone

from .. import reconcile
from ..reconcile import ApplyResult, Desire, apply_locked, known_models, reconcile_lock
from ..wire import Circuit as WireCircuit
from . import discovery
from .plan import desired_backends

log = logging.getLogger(__name__)

__all__ = ["DESIRE", "apply_circuits", "pull_and_apply", "reconcile_apply"]

# Circuits and their discovered models → backends; an apply that removes
# circuits drops their models from this process's discovery cache.
DESIRE = Desire(desired_backends, by_model=True, forget=discovery.forget)


def reconcile_apply(
    circuits: Iterable[WireCircuit],
    *,
    source: str,
    authority: str,
    full: bool = False,
    remove: Collection[str] = (),
    discovery_timeout: float = 2.0,
    lock_timeout: float = 30.0,
) -> ApplyResult:
    """Discover the circuits' models, then apply them (and removals) under the
    reconcile lock (reconcile.reconcile_apply)."""
    circuits = list(circuits)
    models = discovery.discover_models(circuits, known_models(), timeout=discovery_timeout)
    return reconcile.reconcile_apply(
        circuits,
        source=source,
        authority=authority,
        desire=DESIRE,
        models=models,
        full=full,
        remove=remove,
        lock_timeout=lock_timeout,
    )


def apply_circuits(settings, circuits: Iterable[WireCircuit], *, source: str, remove: Collection[str] = ()) -> ApplyResult:
    """A circuit event's apply (created / route_updated / removed)."""
    return reconcile_apply(
        circuits, source=source, authority=settings.authority, remove=remove, discovery_timeout=settings.discovery_timeout
    )


def pull_and_apply(settings, *, client, worker_id: str, node_id: str = "", lock_timeout: float = 30.0) -> ApplyResult:
    """``GET /api/worker/{id}/circuits`` and apply it as the full set (LEG-2).

    Marks the first pull as applied, which makes the node ready (/readyz).
    """
    started = timezone.now()
    with reconcile_lock(settings.authority, blocking_timeout=lock_timeout):
        circuits, failed, errors = client.circuits(worker_id)
        for error in errors:
            log.warning("appproxy: pulled circuit skipped: %s", error)
        models = discovery.discover_models(circuits, known_models(), timeout=settings.discovery_timeout)
        return apply_locked(
            circuits,
            models,
            source="pull",
            authority=settings.authority,
            full=True,
            keep=failed,
            pull_started=started,
            node_id=node_id,
            desire=DESIRE,
        )
