"""What the worker must do now: the pure decision behind the 1 s tick.

Celery beat schedules are static, but ``heartbeat_period`` and
``reconcile_interval`` come from the operator YAML (and can change while the
node runs), so beat runs one cheap tick a second and this function decides
from the persisted WorkerState which jobs are due (reference §7.1, LEG-1/2):

- ``register`` when this tasks process has not registered yet (``node_id`` is
  a fresh id per process start, so a restart re-registers and pulls in full)
  or when the coordinator forgot us (a 404 clears ``node_id``);
- then ``heartbeat`` every ``heartbeat_period`` (the first right after the
  register, which does it inline) and ``reconcile`` every
  ``reconcile_interval`` or as soon as a pull was requested (the events
  process asks after each (re)subscription, to fill any gap);
- nothing while a backoff is running (``retry_at``), so an unreachable
  coordinator is retried exponentially, not every second.

No I/O, no Django, no clock reads: ``now`` is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HEARTBEAT", "RECONCILE", "REGISTER", "View", "backoff", "due"]

REGISTER = "register"
HEARTBEAT = "heartbeat"
RECONCILE = "reconcile"
# A tick fires every second, so "due within SLACK" keeps the period from
# drifting to period + 1 s.
SLACK = 0.3


@dataclass(frozen=True, slots=True)
class View:
    """The WorkerState fields the decision reads (epoch seconds)."""

    worker_id: str = ""
    node_id: str = ""
    last_heartbeat: float | None = None
    last_pull: float | None = None
    retry_at: float | None = None
    pull_requested: bool = False


def due(
    view: View,
    *,
    boot_id: str,
    now: float,
    heartbeat_period: float,
    reconcile_interval: float,
    slack: float = SLACK,
) -> tuple[str, ...]:
    if view.retry_at is not None and now < view.retry_at:
        return ()
    if not view.worker_id or view.node_id != boot_id:
        return (REGISTER,)
    jobs: list[str] = []
    if view.last_heartbeat is None or now - view.last_heartbeat >= heartbeat_period - slack:
        jobs.append(HEARTBEAT)
    if view.pull_requested or view.last_pull is None or now - view.last_pull >= reconcile_interval - slack:
        jobs.append(RECONCILE)
    return tuple(jobs)


def backoff(failures: int, *, cap: float, base: float = 0.5) -> float:
    """Seconds to wait after ``failures`` consecutive failures: 0.5, 1, 2 … cap."""
    if failures <= 0:
        return 0.0
    return min(cap, base * 2 ** min(failures - 1, 30))
