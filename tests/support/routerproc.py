"""Run the real router as a child process (uvicorn or daphne) for e2e tests.

Each RouterProc has its own SQLite file (copied from a migrated template),
its own var/ dir and its own Redis key prefix, so tests never see each
other's state. It waits on /readyz (never a fixed sleep).

A web process applies the YAML only once, at start; the tasks process is the
one writer after that (node/config_watch.py). A test that edits the YAML
of a running router asks for `tasks=True`, which runs the node's tasks
process (Celery worker + beat, as `runnode` does) next to the web process.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from config.server import uvicorn_args

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
_TEMPLATE: Path | None = None


# Ports a test hands to a child process to listen on. Not the kernel's
# ephemeral range (32768-60999 on Linux): a port picked there can be taken as
# the local port of any outgoing connection before the child binds it, and a
# parallel run makes thousands of those. Each process walks this range from
# its own start, so parallel test workers rarely meet; a port still bound (a
# child of an earlier test) is skipped.
_PORTS = range(20000, 32000)
_next_port = _PORTS.start + (os.getpid() * 997) % len(_PORTS)


def free_port() -> int:
    global _next_port
    for _ in range(len(_PORTS)):
        port, _next_port = _next_port, _PORTS.start + (_next_port + 1 - _PORTS.start) % len(_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_PORTS}")


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as exc:  # keep waiting; report the last failure
            last = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def migrated_template() -> Path:
    """One migrated SQLite DB per test session, copied for every router."""
    global _TEMPLATE
    if _TEMPLATE is None:
        tmp = Path(tempfile.mkdtemp(prefix="router-template-"))
        db = tmp / "db.sqlite3"
        env = {**os.environ, "DATABASE_URL": f"sqlite:///{db}", "ROUTER_VAR_DIR": str(tmp)}
        subprocess.run([PY, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
        _TEMPLATE = db
    return _TEMPLATE


class RouterProc:
    def __init__(self, config: str, *, server: str = "uvicorn", env: dict[str, str] | None = None,
                 var_dir: Path | None = None, port: int | None = None, tasks: bool = False) -> None:
        self.dir = var_dir or Path(tempfile.mkdtemp(prefix="router-e2e-"))
        self.config_path = self.dir / "router.yaml"
        self.config_path.write_text(config)
        self.db = self.dir / "db.sqlite3"
        if not self.db.exists():
            shutil.copy(migrated_template(), self.db)
        self.port = port or free_port()
        self.server = server
        self.prefix = f"t{uuid.uuid4().hex[:10]}:"
        self.env = {
            **os.environ,
            "ROUTER_CONFIG": str(self.config_path),
            "ROUTER_VAR_DIR": str(self.dir),
            "DATABASE_URL": f"sqlite:///{self.db}",
            "ROUTER_REDIS_PREFIX": self.prefix,
            "ROUTER_POLL_SECONDS": "2",
            # /status needs this token (or a staff session): status() sends it.
            "ROUTER_STATUS_TOKEN": f"status-{uuid.uuid4().hex}",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.proc: subprocess.Popen | None = None
        self.log_path = self.dir / f"web-{self.port}.log"
        self.with_tasks = tasks
        self.tasks: subprocess.Popen | None = None
        self.tasks_log_path = self.dir / f"tasks-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start_tasks(self) -> None:
        """The node's tasks process (Celery worker + beat), as `runnode` runs it."""
        self.tasks = subprocess.Popen(
            [PY, "-m", "celery", "-A", "config", "worker", "-B", "--pool", "threads", "--concurrency", "2",
             "--loglevel", "INFO", "--without-mingle", "--without-gossip", "--without-heartbeat",
             "-n", f"{self.prefix}{self.port}@%h", "--schedule", str(self.dir / f"celerybeat-{self.port}")],
            cwd=ROOT, env=self.env, stdout=self.tasks_log_path.open("ab"), stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill_tasks(self) -> None:
        """SIGKILL the tasks process (its whole group): a crash, nothing cleaned up."""
        tasks, self.tasks = self.tasks, None
        if tasks is not None:
            os.killpg(tasks.pid, signal.SIGKILL)
            tasks.wait(10)

    def start(self, timeout: float = 60.0, *, wait_ready: bool = True) -> RouterProc:
        if self.with_tasks and self.tasks is None:
            self.start_tasks()
        if self.server == "uvicorn":
            cmd = [PY, "-m", "uvicorn", "config.asgi:application", "--port", str(self.port),
                   "--no-access-log", "--log-level", "warning", "--timeout-graceful-shutdown", "5",
                   "--no-proxy-headers", *uvicorn_args(self.env)]  # as runnode: the router alone reads X-Forwarded-For
        else:
            cmd = [PY, "-m", "daphne", "-p", str(self.port), "config.asgi:application"]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=self.log_path.open("ab"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        if wait_ready:
            wait_until(self._ready, timeout, what=f"router on {self.url} to be ready (log: {self.log_path})")
        return self

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"router exited: {self.logs()[-2000:]}")
        return httpx.get(self.url + "/readyz", timeout=2).status_code == 200

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
        tasks, self.tasks = self.tasks, None
        if tasks is not None and tasks.poll() is None:
            tasks.terminate()
            try:
                tasks.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(tasks.pid, signal.SIGKILL)
                tasks.wait(10)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def status_headers(self) -> dict[str, str]:
        return {"authorization": "Bearer " + self.env["ROUTER_STATUS_TOKEN"]}

    def status(self, timeout: float = 5) -> dict:
        response = httpx.get(self.url + "/status", headers=self.status_headers, timeout=timeout)
        response.raise_for_status()
        return response.json()

    def revision(self) -> int:
        return int(self.status()["revision"])

    def write_config(self, config: str, timeout: float = 10.0) -> None:
        """Rewrite the YAML and wait until this process runs the new revision
        (applied by the node's tasks process: `tasks=True`, or a node's own)."""
        before = self.revision()
        self.config_path.write_text(config)
        wait_until(lambda: self.revision() > before, timeout, what="config reload")

    def manage(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([PY, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True,
                              text=True, timeout=60)

    def staff_session(self) -> httpx.Client:
        """A new superuser in this router's DB, signed in through the real
        admin login form: a client of the staff-only dashboard."""
        user, password = f"op{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
        made = subprocess.run(
            [PY, "manage.py", "createsuperuser", "--noinput", "--username", user, "--email", "op@example.com"],
            cwd=ROOT, env={**self.env, "DJANGO_SUPERUSER_PASSWORD": password},
            capture_output=True, text=True, timeout=120,
        )
        assert made.returncode == 0, made.stderr
        client = httpx.Client(base_url=self.url, timeout=30)
        client.get("/admin/login/")
        done = client.post(
            "/admin/login/?next=/dashboard/",
            data={"username": user, "password": password, "next": "/dashboard/",
                  "csrfmiddlewaretoken": client.cookies["csrftoken"]},
        )
        assert done.status_code == 302 and done.headers["location"] == "/dashboard/", done.text[:500]
        return client

    def __enter__(self) -> RouterProc:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
