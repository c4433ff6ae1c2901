"""Supervision of a node's child processes (what `manage.py runnode` runs).

Invariants:
- Every child runs in its own process group (its own session) and gets
  SIGTERM when the supervisor dies, even by SIGKILL (PR_SET_PDEATHSIG), so a
  node never leaves orphans; stopping signals each whole group, then kills
  what is left after the grace period.
- A stop drains: the children marked `stop_first` (the tasks process, which
  deregisters the node from the AppProxy coordinator as it exits) are
  stopped and waited for first, up to `first_s`; only then does every other
  child get SIGTERM (the web stops accepting and finishes what is in flight
  within its own grace, which the caller makes shorter than `grace_s`).
- Start is all or nothing: a child that exits within its start window (or a
  web child whose port or Unix socket does not accept connections by then)
  is a start failure — everything started is stopped and the caller exits
  non-zero. A child's Unix socket file left by its previous run is removed
  before each spawn, and the file after the stop.
- After start, a child that dies is restarted with a bounded exponential
  backoff (BACKOFF_MIN_S doubling to BACKOFF_MAX_S; reset once it stayed up
  STABLE_S); the others keep running (the web keeps serving /v1).
- The state of every child is written to a small JSON file that the web
  processes read for /readyz, /status and the dashboard (node.nodestate).
- A child with a log file (`ChildSpec.log`) writes its output there, not to
  the terminal (node/childlog.py): what reaches the terminal is the
  supervisor's own lines — a start failure with the end of that child's log,
  a restart naming its log, and each warning or error a child logs.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from router import listen

from .childlog import ChildLog

BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 30.0
STABLE_S = 30.0
_PR_SET_PDEATHSIG = 1
LOG_LIMIT_BYTES = 64 << 20  # per child log file; runnode: ROUTER_CHILD_LOG_BYTES
LOG_READ_EVERY_S = 0.5
LOG_TRIM_EVERY_S = 5.0
ECHO_REPEAT_S = 10.0  # one message logged by several children (web and tasks) is said once


class StartFailure(Exception):
    """A child could not start; the message says which and why."""


@dataclass(slots=True)
class ChildSpec:
    name: str
    argv: list[str]
    listen: tuple[str, int] | None = None  # must accept connections to count as started
    unix: str | None = None  # a Unix socket it serves: must accept too; a stale file is removed before
    # each spawn, the file after the stop (router/listen.py)
    start_window_s: float = 3.0
    stop_first: bool = False  # stopped (and waited for) before the others at a stop
    log: Path | None = None  # its stdout and stderr; None: the supervisor's own (the terminal)


@dataclass
class Child:
    spec: ChildSpec
    proc: subprocess.Popen | None = None
    state: str = "starting"  # starting | running | restarting
    restarts: int = 0
    started_at: float = 0.0
    backoff_s: float = BACKOFF_MIN_S
    restart_at: float = 0.0
    last_exit: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    log: ChildLog | None = None

    def view(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "pid": self.proc.pid if self.proc is not None and self.state != "restarting" else None,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
            "next_restart_in_s": round(max(self.restart_at - time.monotonic(), 0.0), 1)
            if self.state == "restarting" else None,
        }


def port_in_use(host: str, port: int) -> bool:
    """True when binding host:port fails the way the server's bind would."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def _accepts(host: str, port: int) -> bool:
    target = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    try:
        with socket.create_connection((target, port), timeout=0.5):
            return True
    except OSError:
        return False


def _addresses(spec: ChildSpec) -> list[str]:
    where = [f"{spec.listen[0]}:{spec.listen[1]}"] if spec.listen is not None else []
    return where + ([f"unix:{spec.unix}"] if spec.unix is not None else [])


def _die_with_parent(parent: int) -> Callable[[], None]:
    def preexec() -> None:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):  # not Linux: the group kill on exit remains
            pass
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os._exit(1)

    return preexec


class Supervisor:
    def __init__(self, specs: list[ChildSpec], *, cwd: Path, env: Mapping[str, str] | None = None,
                 write_state: Callable[[dict[str, Any]], None] | None = None,
                 say: Callable[[str], None] = print, log_limit_bytes: int = LOG_LIMIT_BYTES) -> None:
        self.children = [Child(spec, log=ChildLog(spec.log) if spec.log is not None else None) for spec in specs]
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self._write_state = write_state
        self.say = say
        self.extra_state: dict[str, Any] = {}
        self._last_write = 0.0
        self.log_limit_bytes = log_limit_bytes
        self._logs_read_at = self._logs_trimmed_at = 0.0
        self._echoed: dict[str, float] = {}

    # -- processes ---------------------------------------------------------
    def _spawn(self, child: Child) -> None:
        if child.spec.unix is not None:
            try:  # a socket the child left when it died; its server would not bind over it
                listen.clear_stale(child.spec.unix)
            except OSError as exc:
                self.say(f"router: {child.spec.name}: {exc}")
        out = child.log.open(child.spec.name) if child.log is not None else None
        try:
            child.proc = subprocess.Popen(child.spec.argv, cwd=self.cwd, env=self.env, start_new_session=True,
                                          preexec_fn=_die_with_parent(os.getpid()),
                                          stdout=out, stderr=subprocess.STDOUT if out is not None else None)
        finally:
            if out is not None:
                out.close()  # the child has its own descriptor
        child.started_at = time.monotonic()

    @staticmethod
    def _output(child: Child) -> str:
        """Where a start failure's reader finds what the child said."""
        if child.log is None:
            return " (see its output above)"
        tail = child.log.tail()
        shown = "".join(f"\n    {line}" for line in tail.splitlines()) if tail else "\n    (nothing)"
        return f"; the end of its log ({child.log.path}):{shown}"

    def start(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Spawn every child and wait out their start windows; StartFailure
        (after stopping them all) when one exits or never listens."""
        for child in self.children:
            if child.log is not None:
                child.log.start()
            self._spawn(child)
        pending = list(self.children)
        while pending and not should_stop():
            for child in list(pending):
                assert child.proc is not None
                code = child.proc.poll()
                if code is not None:
                    self.stop()
                    raise StartFailure(f"{child.spec.name} exited with {code} while starting{self._output(child)}")
                up = time.monotonic() - child.started_at
                if child.spec.listen is not None or child.spec.unix is not None:
                    if self._listening(child.spec):
                        child.state = "running"
                        pending.remove(child)
                    elif up >= child.spec.start_window_s:
                        self.stop()
                        where = " and ".join(_addresses(child.spec))
                        raise StartFailure(f"{child.spec.name} does not accept connections on "
                                           f"{where} after {child.spec.start_window_s:.0f}s"
                                           f"{self._output(child) if child.log is not None else ''}")
                elif up >= child.spec.start_window_s:
                    child.state = "running"
                    pending.remove(child)
            self.publish()
            time.sleep(0.1)

    @staticmethod
    def _listening(spec: ChildSpec) -> bool:
        return (spec.listen is None or _accepts(*spec.listen)) and (spec.unix is None or listen.accepts(spec.unix))

    def tick(self) -> None:
        """Notice exits and restart what is due; call every ~0.2 s."""
        now = time.monotonic()
        changed = False
        for child in self.children:
            proc = child.proc
            if child.state == "running" and proc is not None and proc.poll() is not None:
                child.last_exit = proc.returncode
                self._kill_group(proc, signal.SIGKILL)  # what it left behind
                if now - child.started_at >= STABLE_S:
                    child.backoff_s = BACKOFF_MIN_S
                child.state, child.restart_at = "restarting", now + child.backoff_s
                self.say(f"router: {child.spec.name} exited with {proc.returncode}; "
                         f"restarting in {child.backoff_s:.0f}s (restart {child.restarts + 1})"
                         + (f"; its log: {child.log.path}" if child.log is not None else ""))
                child.backoff_s = min(child.backoff_s * 2, BACKOFF_MAX_S)
                changed = True
            elif child.state == "restarting" and now >= child.restart_at:
                child.restarts += 1
                self._spawn(child)
                child.state = "running"
                changed = True
        self.publish(force=changed)
        self._read_logs(now)

    def _read_logs(self, now: float) -> None:
        """Say each warning or error the children logged (once, however many
        of them logged it), then keep their files within the limit."""
        if now - self._logs_read_at < LOG_READ_EVERY_S:
            return
        self._logs_read_at = now
        self._echoed = {msg: at for msg, at in self._echoed.items() if now - at < ECHO_REPEAT_S}
        logs = [(c.spec.name, c.log) for c in self.children if c.log is not None]
        for name, log in logs:
            try:
                found = log.notable()
            except OSError as exc:
                found = [("warning", f"its log {log.path} not read: {exc}")]
            for level, message in found:
                if message not in self._echoed:
                    self._echoed[message] = now
                    self.say(f"router: {name}: {level}: {message}")
        if now - self._logs_trimmed_at >= LOG_TRIM_EVERY_S:
            self._logs_trimmed_at = now
            for name, log in logs:
                try:
                    log.trim(self.log_limit_bytes)
                except OSError as exc:
                    self.say(f"router: {name}: its log {log.path} not trimmed: {exc}")

    def publish(self, force: bool = True) -> None:
        if self._write_state is None or (not force and time.monotonic() - self._last_write < 2.0):
            return
        self._last_write = time.monotonic()
        try:
            self._write_state({"supervisor_pid": os.getpid(),
                               "processes": {c.spec.name: c.view() for c in self.children},
                               **self.extra_state})
        except OSError as exc:
            self.say(f"router: node state not written: {exc}")

    @staticmethod
    def _wait(procs: list[subprocess.Popen], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            try:
                proc.wait(max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass

    @staticmethod
    def _kill_group(proc: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, grace_s: float = 10.0, first_s: float = 10.0) -> None:
        """SIGTERM the `stop_first` children's groups and wait for them (at
        most first_s), then every other child's group; SIGKILL what is left
        grace_s after that."""
        first = [c.proc for c in self.children if c.proc is not None and c.spec.stop_first]
        rest = [c.proc for c in self.children if c.proc is not None and not c.spec.stop_first]
        for proc in first:
            self._kill_group(proc, signal.SIGTERM)
        self._wait(first, first_s)
        for proc in rest:
            self._kill_group(proc, signal.SIGTERM)
        self._wait(first + rest, grace_s)
        for proc in first + rest:
            self._kill_group(proc, signal.SIGKILL)  # stragglers, grandchildren included
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for child in self.children:  # its server removes it, unless it was killed
            if child.spec.unix is not None:
                listen.remove_socket(child.spec.unix)
