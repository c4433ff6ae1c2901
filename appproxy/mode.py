"""What an AppProxy mode provides to the code every mode shares.

A mode is a package of appproxy/ (legacy/: the wildcard worker, section
``appproxy``; router_mode/: the ROUTER worker, section ``appproxy_router``)
whose ``mode.py`` builds one ``Mode``; appproxy/modes.py lists them. The
shared processes call a mode only through these fields: the tasks process
(tasks.py, worker.py) registers, heartbeats and pulls, the events process
(subscriber.py, events.py) applies events, the web process plugs in
(apps.py) and ``manage.py doctor`` checks (doctor.py). A settings object is
its section's validated settings (``config.WorkerSettings`` and what the
mode adds); ``settings.mode`` names its Mode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from node.doctor import Context, Result

from .client import CoordinatorClient
from .envelope import Event
from .reconcile import ApplyResult
from .wire import WorkerInfo

__all__ = ["Mode", "OwnEvents"]


@dataclass(frozen=True, slots=True)
class OwnEvents:
    """The events a mode handles besides the circuit events, on the same bus.
    Each is decoded, applied in the events process's DB thread, acked and
    counted; one that fails is recorded and left to the next pull."""

    names: frozenset[str]  # the event names
    # The event's fields: an object with name, fmt, authority, kind and
    # ack_id; raises envelope.EnvelopeError when the body does not fit.
    decode: Callable[[Event], Any]
    apply: Callable[[Any, Any, str], None]  # (decoded, settings, node_id)
    # (authority, node_id, kind, ack_id, fmt, *, request_id) → the ack to publish
    ack: Callable[..., bytes]
    # (name, applied, received → applied s, received → acked s): metrics
    counted: Callable[[str, bool, float | None, float | None], None]


def _nothing(*_args: Any) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Mode:
    """One AppProxy mode, as the shared code calls it."""

    name: str  # settings.mode
    section: str  # its YAML section, and the prefix of its log lines
    load_settings: Callable[[], Any]  # the applied section's settings, or None
    parse_section: Callable[[Any], Any]  # a raw section → settings or None; ValueError naming keys
    plug_in: Callable[[], None]  # into router.extensions (AppproxyConfig.ready)
    # PUT /api/worker with the mode's body: (client, settings, node_id) → the worker
    register: Callable[[CoordinatorClient, Any, str], WorkerInfo]
    # A full pull: (settings, *, client, worker_id, node_id)
    pull: Callable[..., ApplyResult]
    # A circuit event's apply: (settings, circuits, *, source, remove)
    apply_circuits: Callable[..., ApplyResult]
    # Another mode is active or none is: drop what only this mode keeps;
    # True when something was dropped (logged with `cleared`).
    clear: Callable[[], bool]
    cleared: str
    secrets: tuple[str, ...]  # the section's secret keys (doctor)
    names_node: bool = False  # the heartbeat and the deregistration name this node
    # After a registration was stored: (settings, node_id, first of this node session)
    registered: Callable[[Any, str, bool], None] = _nothing
    doctor: Callable[[Context, Any], Iterator[Result]] | None = None  # the mode's own doctor checks
    events: OwnEvents | None = None
    idle: Callable[[str], None] | None = None  # (authority): the events process has nothing to do

