"""Servers a fault test owns: its own redis-server and its own PostgreSQL cluster.

A fault test stops and starts these at will; the machine's shared Redis and
PostgreSQL are never touched. Both listen on 127.0.0.1 on a free port and
keep their files in a temporary folder removed at `cleanup()`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.routerproc import free_port, wait_until


def _pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    raise RuntimeError(f"{name} not found: install PostgreSQL's server package (Debian: postgresql)")


class OwnedRedis:
    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="faults-redis-"))
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> OwnedRedis:
        self.proc = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.dir)],
            stdout=(self.dir / "redis.log").open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
        )
        wait_until(self._answers, 20, what=f"redis-server on {self.port}")
        return self

    def _answers(self) -> bool:
        out = subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() == "PONG"

    def stop(self) -> None:
        """A hard stop (SIGKILL): everything in memory is gone, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class OwnedPostgres:
    """A throwaway PostgreSQL cluster (initdb), run as the `postgres` user when we are root."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="faults-pg-"))
        self.data = self.dir / "data"
        self.sock = self.dir / "sock"
        self.sock.mkdir()
        self._as: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
            shutil.chown(self.sock, "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        self._run(_pg_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def _run(self, *cmd: str) -> None:
        subprocess.run([*self._as, *cmd], check=True, capture_output=True, timeout=120)

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> OwnedPostgres:
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "pg.log"), "-w", "-t", "60",
                  "-o", f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
        return self

    def stop(self) -> None:
        """Immediate shutdown: every connection is cut at once."""
        if (self.data / "postmaster.pid").exists():
            self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "-t", "60", "stop")

    def cleanup(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


def hold(seconds: float) -> None:
    """Keep a fault in place for a while (the fault's duration, not a wait for a condition)."""
    time.sleep(seconds)
