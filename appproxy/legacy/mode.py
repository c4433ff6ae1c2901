"""The legacy wildcard worker as the shared AppProxy code calls it (``MODE``):
the ``appproxy`` section, the Host ingress it plugs into every snapshot, its
registration, pulls and circuit events with model discovery.
"""

from __future__ import annotations

from typing import Any

from router import extensions

from ..client import CoordinatorClient
from ..mode import Mode
from ..models import CIRCUIT, WORKER
from ..wire import WorkerInfo, WorkerRegistration
from . import discovery
from .config import load_settings, parse_section, validate_section
from .doctor import wildcard
from .selectors import compile_ingress
from .services import apply_circuits, pull_and_apply
from .status import readiness, worker_status

__all__ = ["MODE"]


def plug_in() -> None:
    """The ``appproxy`` YAML section, the Host ingress table and the worker's
    readiness and /status facts, into the data plane (router.extensions)."""
    extensions.register_section_validator("appproxy", validate_section)
    extensions.register_snapshot_part("ingress", compile_ingress, topics=("document", CIRCUIT, WORKER))
    extensions.register_readiness("appproxy", readiness)
    extensions.register_status_section("appproxy", worker_status)


def register(client: CoordinatorClient, settings: Any, _node_id: str) -> WorkerInfo:
    """``PUT /api/worker``: a wildcard inference worker."""
    return client.register(WorkerRegistration.from_settings(settings, api_port=settings.registration_port()))


def clear() -> bool:
    """Not the active mode: this process's discovered models go (nothing in the DB is only this mode's)."""
    discovery.forget_all()
    return False


MODE = Mode(
    name="wildcard",
    section="appproxy",
    load_settings=load_settings,
    parse_section=parse_section,
    plug_in=plug_in,
    register=register,
    pull=pull_and_apply,
    apply_circuits=apply_circuits,
    clear=clear,
    cleared="discovered models",
    secrets=("api_secret", "jwt_secret"),
    doctor=wildcard,
)
