"""A whole node (`manage.py runnode`) as a test's own process, on free ports."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from pathlib import Path

import httpx

from tests.support.routerproc import PY, ROOT, free_port, migrated_template, wait_until

CONFIG = """
backends:
  - name: b1
    url: http://127.0.0.1:9
    models: [m]
"""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class NodeProc:
    def __init__(self, *, env: dict[str, str] | None = None, args: tuple[str, ...] = (),
                 var_dir: Path | None = None, port: int | None = None, config: str = CONFIG) -> None:
        self.dir = var_dir or Path(tempfile.mkdtemp(prefix="router-node-"))
        (self.dir / "router.yaml").write_text(config)
        db = self.dir / "db.sqlite3"
        if not db.exists():
            shutil.copy(migrated_template(), db)
        self.port = port or free_port()
        self.env = {**os.environ, "ROUTER_CONFIG": str(self.dir / "router.yaml"), "ROUTER_VAR_DIR": str(self.dir),
                    "DATABASE_URL": f"sqlite:///{db}", "PYTHONUNBUFFERED": "1",
                    "ROUTER_STATUS_TOKEN": uuid.uuid4().hex, **(env or {})}
        if "ROUTER_REDIS_PREFIX" not in (env or {}):
            self.env.pop("ROUTER_REDIS_PREFIX", None)  # the per-deployment default
        self.args = args
        self.log_path = self.dir / f"node-{uuid.uuid4().hex[:6]}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spawn(self) -> NodeProc:
        self.proc = subprocess.Popen([PY, "manage.py", "runnode", "--port", str(self.port), *self.args],
                                     cwd=ROOT, env=self.env, stdout=self.log_path.open("ab"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def start(self, timeout: float = 90.0) -> NodeProc:
        self.spawn()
        wait_until(self._serving, timeout, interval=0.2, what=f"node on {self.url} (log {self.log_path})")
        return self

    def _serving(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"node exited {self.proc.returncode}: {self.logs()[-3000:]}")
        return "Ctrl-C stops everything" in self.logs() and self.readyz().status_code == 200

    def readyz(self) -> httpx.Response:
        return httpx.get(self.url + "/readyz", timeout=5)

    def status(self) -> dict:
        headers = {"authorization": "Bearer " + self.env["ROUTER_STATUS_TOKEN"]}
        response = httpx.get(self.url + "/status", headers=headers, timeout=5)
        response.raise_for_status()
        return response.json()

    def node(self) -> dict:
        """The node's health detail (/status); /readyz names the degraded parts only."""
        return self.status()["node"]

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
