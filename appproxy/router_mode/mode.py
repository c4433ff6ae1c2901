"""The ROUTER worker as the shared AppProxy code calls it (``MODE``): the
``appproxy_router`` section, what it plugs into every snapshot (forced
blocking keys, the published names, its registration facts) and into
/metrics, its registration, pulls, circuit events and its own events
(publications and coordinator keys).
"""

from __future__ import annotations

from typing import Any

from router import extensions
from router.revision import bump_revision, touch

from ..client import CoordinatorClient
from ..mode import Mode, OwnEvents
from ..models import PUBLICATION, WORKER
from ..wire import WorkerInfo
from . import metrics, status
from .config import load_router_settings, parse_router_section, validate_router_section
from .events import ROUTER_EVENTS, decode_router, encode_router_ack
from .services import apply_circuits, apply_event, clear_router_mirror, router_pull_and_apply, warm_publications
from .wire import router_registration

__all__ = ["MODE"]


def plug_in() -> None:
    """Forced blocking keys, the published names, this node's registration
    facts (readiness) and /status into the data plane (router.extensions),
    and the worker's counts into /metrics."""
    extensions.register_section_validator("appproxy_router", validate_router_section)
    extensions.register_snapshot_part("api_keys_mode", status.compile_mode, topics=("document",))
    extensions.register_snapshot_part("listed", status.compile_listed, topics=("document", PUBLICATION))
    extensions.register_snapshot_part("worker", status.compile_worker, topics=("document", WORKER))
    extensions.register_readiness("appproxy_router", status.readiness)
    extensions.register_status_section("appproxy_router", status.router_status)
    metrics.register()  # /metrics: the ROUTER worker's counts from the node's Redis hash


def register(client: CoordinatorClient, settings: Any, node_id: str) -> WorkerInfo:
    """``PUT /api/worker`` with the ROUTER body: this node, its traffic port."""
    return client.register_router(
        router_registration(
            authority=settings.authority,
            hostname=settings.hostname,
            api_port=settings.registration_port(),
            traffic_port=settings.advertised_traffic_port(),
            node_id=node_id,
            tls_listen=settings.tls_listen,
            tls_advertised=settings.tls_advertised,
        )
    )


def registered(_settings: Any, node_id: str, first: bool) -> None:
    metrics.record_revision("")  # a (re)registration pulls in full
    if first:
        touch(WORKER, node_id)
        bump_revision("appproxy registered")  # /readyz reads it


def clear() -> bool:
    """Not the active mode: publications and coordinator keys go."""
    return clear_router_mirror()


MODE = Mode(
    name="router",
    section="appproxy_router",
    load_settings=load_router_settings,
    parse_section=parse_router_section,
    plug_in=plug_in,
    register=register,
    pull=router_pull_and_apply,
    apply_circuits=apply_circuits,
    clear=clear,
    cleared="publications and coordinator keys",
    secrets=("api_secret",),
    names_node=True,
    registered=registered,
    events=OwnEvents(
        names=ROUTER_EVENTS,
        decode=decode_router,
        apply=apply_event,
        ack=encode_router_ack,
        counted=metrics.record_event,
    ),
    idle=warm_publications,
)
