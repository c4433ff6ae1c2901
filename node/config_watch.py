"""The one writer of the operator YAML: the tasks process.

The tasks process (Celery worker + embedded beat) applies the file once when
it starts, then whenever the file changed: a thread of its own looks at the
file every `ROUTER_CONFIG_POLL_SECONDS` (0.01 s, one stat call) and applies
a file renamed over the path at the next look, one rewritten in place once
its (mtime, size) held for 25 ms (within about 10 / 35 ms); the beat
task `router.sync_config` (every second, config/celery.py) is the backstop
when that thread is off. Both go through the digest-checked, incremental
`config_sync` (only the backends whose text changed are compared and
written). A web process only runs the same digest-checked sync once at
start (router/runtime.py), so the first request never waits for the tasks
process; every reader — web processes, appproxy's tasks and events — reads
the compiled document from the DB (ConfigDocument), never the file.

A file the sync refuses keeps the previous state serving. The refusal is
logged here and left in Redis (`config_error_key()`) until a sync succeeds, so
each web process reports it in /status and its log (router/runtime.py). A
good sync deletes it; when the good file is the one the DB already holds (the
bad edit was undone), nothing else changed, so the writer bumps the revision
itself: every web process reloads and drops the stale `last_error`. A clear
that could not reach Redis is retried on the next tick.

The prompt files the applied YAML names (`global_prompts`) are looked at
with it: their (mtime, size, inode) are part of what a look compares, so an
edit of one is applied (read into the mirror) like an edit of the YAML.

Invariants: one sync at a time per process (a run that finds another still
going skips: the next tick retries); the file is re-read only when its
(mtime, size, inode) changed since the last run, or after a failure of the sync
itself (not of the file), so a refused file is reported once per edit.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db import close_old_connections
from redis.exceptions import RedisError

from router.config_schema import ConfigError
from router.redis import sync_client
from router.revision import NOTHING, bump_revision, config_error_key, touch
from router.services import config_sync, resolve_config_path, watched_prompt_files

log = logging.getLogger(__name__)

_lock = threading.Lock()
_seen: dict[str, object] = {"stat": None}


def _file_stat(path: Path) -> tuple[str, int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (str(path), st.st_mtime_ns, st.st_size, st.st_ino)


def _stat(path: Path) -> tuple | None:
    """What a look compares: the YAML's (path, mtime, size, inode), followed
    by those of the prompt files it names (None for one that is gone)."""
    own = _file_stat(path)
    if own is None:
        return None
    prompts = watched_prompt_files(path)
    return own + tuple(_file_stat(p) for p in prompts) if prompts else own


def _replaced(stat: tuple | None, seen: object) -> bool:
    """The path names another file than last time (a rename over it, as
    os.replace, most editors and a Kubernetes ConfigMap update do): that file
    was complete before it got the name, so it need not settle."""
    return stat is not None and isinstance(seen, tuple) and stat[0] == seen[0] and stat[3] != seen[3]


def _report(error: str | None) -> bool | None:
    """Share the outcome with the web processes. For a good sync: whether a
    refusal was pending; None when Redis could not be reached."""
    try:
        if error is None:
            return bool(sync_client().delete(config_error_key()))
        sync_client().set(config_error_key(), error)
        return False
    except RedisError as exc:  # the log still has it
        log.warning("config error not shared with the web processes (%s)", type(exc).__name__)
        return None


def sync_file(*, force_read: bool = False) -> bool:
    """Apply the YAML if it changed since the last look. True when the DB changed."""
    if not _lock.acquire(blocking=False):
        return False
    try:
        path = resolve_config_path()
        stat = _stat(path)
        if not force_read and stat == _seen["stat"]:
            return False
        try:
            changed = config_sync(path, incremental=True)
        except ConfigError as exc:
            _seen["stat"] = stat
            log.error("config file not applied: %s", exc)
            _report(str(exc))
            return False
        pending = _report(None)
        if pending is None:  # a refusal may still be in Redis: clear it next tick
            return changed
        _seen["stat"] = stat
        if pending and not changed:
            # The file is back to what the DB holds: no revision would tell
            # the web processes, so bump one (they reload and clear last_error).
            touch(NOTHING, "config file restored")
            bump_revision("config file restored")
            changed = True
        return changed
    finally:
        _lock.release()


@shared_task(name="router.sync_config", ignore_result=True)
def sync_config() -> bool:
    """Beat, every second: apply the YAML when it changed (ROUTER_WATCH_CONFIG),
    unless the watcher thread runs."""
    if not settings.ROUTER_WATCH_CONFIG:
        return False
    thread = _watcher.get("thread")
    if isinstance(thread, threading.Thread) and thread.is_alive():
        return False  # the watcher thread has it (and waits for the file to settle)
    return sync_file()


SETTLE_SECONDS = 0.025  # an in-place rewrite is applied once its (mtime, size) held this long


def _watch(interval: float, stop: threading.Event) -> None:
    """Until ``stop``: apply the file once it changed. A file renamed over
    the path is applied at the next look; one rewritten in place (same
    inode) once its (mtime, size) held for SETTLE_SECONDS and at least one
    more look, so a writer that truncates and rewrites is never read
    half-written (a short file would remove backends)."""
    pending, since = None, 0.0
    failing = ""  # the last failure, logged once; looks slow to 1 s meanwhile
    while not stop.wait(max(interval, 1.0) if failing else interval):
        try:
            stat = _stat(resolve_config_path())
            seen = _seen["stat"]
            if stat == seen:
                pending = None
                continue
            if not _replaced(stat, seen):
                if stat != pending:
                    pending, since = stat, time.monotonic()
                    continue
                if time.monotonic() - since < SETTLE_SECONDS:
                    continue
            pending = None
            sync_file()
            failing = ""
        except Exception as exc:  # e.g. the DB is down: the next look, or the beat task, tries again
            if str(exc) != failing:
                log.warning("config file not applied (%s: %s); retrying every second", type(exc).__name__, exc)
            failing = str(exc) or type(exc).__name__
        finally:
            close_old_connections()


_watcher: dict[str, object] = {}


def start_watcher() -> threading.Thread | None:
    """The quick watcher thread (once per process; none when watching is off)."""
    interval = settings.ROUTER_CONFIG_POLL_SECONDS
    if not settings.ROUTER_WATCH_CONFIG or interval <= 0 or "thread" in _watcher:
        return None
    stop = threading.Event()
    thread = threading.Thread(target=_watch, args=(interval, stop), name="router-config-watch", daemon=True)
    _watcher.update(thread=thread, stop=stop)
    thread.start()
    return thread


def stop_watcher() -> None:
    stop, thread = _watcher.pop("stop", None), _watcher.pop("thread", None)
    if isinstance(stop, threading.Event):
        stop.set()
    if isinstance(thread, threading.Thread):
        thread.join(timeout=5)


@worker_ready.connect
def _sync_at_start(**_kwargs: object) -> None:
    """The tasks process applies the file before its first tick, then watches it."""
    try:
        sync_file(force_read=True)
    except Exception:  # the beat task retries; never keep the worker from starting
        log.exception("config file not applied at start")
    start_watcher()
