"""The AppProxy part of `manage.py doctor` (registered in apps.py).

For the enabled section (`appproxy`, the legacy wildcard worker, or
`appproxy_router`, the ROUTER worker) of the YAML file:

- its secrets are set (and come from ``${ENV}``, not written in the file);
- the coordinator answers and accepts the token: one read-only call through
  the worker's own client (``GET /api/worker/<nil id>/circuits``: a 404 "no
  such worker" means auth passed, a 401/403 means the token is refused);
- the registration this database recorded for the authority is one the
  coordinator knows (the same read-only call with the recorded worker id);
- the event bus Redis answers when the section names its own;
- the mode's own checks (``Mode.doctor``; legacy: a random label under
  ``wildcard_domain`` resolves).

Nothing is registered, heartbeated or written. No secret is shown.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis
from django.utils import timezone

from node.doctor import Context, Result, fail, ok, warn
from router.core.backend import masked_url

from . import modes, node
from .client import CoordinatorError, CoordinatorUnavailable, WorkerNotFound, client_for
from .mode import Mode
from .models import WorkerState

__all__ = ["check"]

NIL_WORKER = "00000000-0000-0000-0000-000000000000"


def _enabled(ctx: Context) -> tuple[Mode, Any] | None:
    doc = ctx.document
    if doc is None:
        return None
    for mode in modes.MODES:
        settings = mode.parse_section(getattr(doc, mode.section))
        if settings is not None and settings.enabled:
            return mode, settings
    return None


def check(ctx: Context) -> Iterator[Result]:
    if ctx.document is None:
        return  # the config checks said why
    found = _enabled(ctx)
    if found is None:
        yield ok("appproxy", "off (neither appproxy nor appproxy_router is enabled)")
        return
    mode, settings = found
    section = mode.section
    yield from _secrets(ctx, section, settings, mode.secrets)
    accepted = yield from _coordinator(section, settings)
    if accepted:
        yield from _registration(ctx, section, settings)
    yield from _bus(section, settings)
    if mode.doctor is not None:
        yield from mode.doctor(ctx, settings)


def _secrets(ctx: Context, section: str, settings: Any, names: tuple[str, ...]) -> Iterator[Result]:
    raw = (ctx.raw or {}).get(section) or {}
    for name in names:
        label = f"{section}.{name}"
        if not getattr(settings, name):
            yield fail(
                f"appproxy.{name}", f"{label} missing", f"set {label}: ${{APPPROXY_{name.upper()}}} and export it"
            )
        elif "${" not in str(raw.get(name, "")):
            yield warn(
                f"appproxy.{name}",
                f"{label} set, but written in the YAML file",
                f"move it to the environment: {label}: ${{APPPROXY_{name.upper()}}}",
            )
        else:
            yield ok(f"appproxy.{name}", f"{label} set (from the environment)")


def _coordinator(section: str, settings: Any):
    url = masked_url(settings.coordinator_url)
    try:
        with client_for(settings) as client:
            client.circuit_items(NIL_WORKER)
    except WorkerNotFound:
        pass  # auth passed; no such worker, as expected
    except CoordinatorUnavailable as exc:
        yield fail(
            "appproxy.coordinator",
            f"{url} unreachable ({exc})",
            f"start the coordinator, or fix {section}.coordinator_url",
        )
        return False
    except CoordinatorError as exc:
        if exc.status in (401, 403):
            yield fail(
                "appproxy.coordinator",
                f"{url} refuses the token (HTTP {exc.status})",
                f"set {section}.api_secret to the coordinator's api secret",
            )
        else:
            yield fail("appproxy.coordinator", f"{url}: {exc}", f"check {section}.coordinator_url")
        return False
    yield ok("appproxy.coordinator", f"{url} reachable, token accepted")
    return True


def _row(authority: str) -> WorkerState | None:
    """This node's row (its node id is announced by its tasks process), else
    the newest registered one of the authority, else the newest at all."""
    node_id = node.current()
    row = WorkerState.objects.filter(authority=authority, node_id=node_id).first() if node_id else None
    rows = WorkerState.objects.filter(authority=authority).order_by("-updated_at")
    return row or rows.exclude(worker_id="").first() or rows.first()


def _registration(ctx: Context, section: str, settings: Any) -> Iterator[Result]:
    name, authority = "appproxy.registration", settings.authority
    if not ctx.db_ready:
        yield warn(name, "not checked: the database is not ready", "fix the database (above)")
        return
    row = _row(authority)
    start = "start the node (manage.py runnode): its tasks process registers"
    if row is None:
        yield warn(name, f"authority {authority!r} has not registered from this database yet", start)
        return
    if not row.worker_id:
        if row.status == "deregistered":
            yield warn(name, f"authority {authority!r} deregistered (the node stopped)", start)
        else:
            why = f": {row.last_error[:200]}" if row.last_error else ""
            yield fail(
                name,
                f"authority {authority!r} not registered (status {row.status}{why})",
                "the tasks process retries with backoff: fix the cause named, and check that it runs",
            )
        return
    try:
        with client_for(settings) as client:
            items, _ = client.circuit_items(row.worker_id)
    except WorkerNotFound:
        yield fail(
            name,
            f"the coordinator does not know worker {row.worker_id} (recorded for {authority!r})",
            f"restart the node's tasks process (it registers again); check that {section}.coordinator_url "
            "is the coordinator it registered with",
        )
        return
    except CoordinatorError as exc:
        yield fail(name, f"worker {row.worker_id}: {exc}", "see appproxy.coordinator")
        return
    found = f"worker {row.worker_id} of {authority!r} registered ({len(items)} circuits)"
    if row.last_heartbeat_at is not None:
        age = (timezone.now() - row.last_heartbeat_at).total_seconds()
        if age > max(30.0, 3 * settings.heartbeat_period):
            yield warn(
                name,
                f"{found}; last heartbeat {age:.0f} s ago",
                "is the node's tasks process running? (manage.py runnode starts it)",
            )
            return
    yield ok(name, found)


def _bus(section: str, settings: Any) -> Iterator[Result]:
    if not settings.events_enabled or not settings.redis_url:
        return  # the node's own Redis, checked above
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=3, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        yield fail(
            "appproxy.bus",
            f"{masked_url(settings.redis_url)} unreachable ({type(exc).__name__})",
            f"start the coordinator's Redis, or fix {section}.redis_url",
        )
        return
    finally:
        client.close()
    yield ok("appproxy.bus", f"{masked_url(settings.redis_url)} answers")
