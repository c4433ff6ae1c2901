"""Cluster-scale benchmark (issue 13): how the node behaves with a cluster's worth of state.

    .venv/bin/python bench/scale.py                        # full size, SQLite and PostgreSQL
    .venv/bin/python bench/scale.py --scale 0.05 --db sqlite   # a quick run
    .venv/bin/python bench/scale.py --small                # the 10-backend baseline only
    .venv/bin/python bench/scale.py --mode yaml            # YAML mode only (--mode router: ROUTER only)
    .venv/bin/python bench/scale.py --json scale.json

State, built from scratch per database (a temp SQLite file; a fresh temp
PostgreSQL database that is created and dropped): at full size 20,000 backends
(5,000 "circuits" x 4 replicas, written as one YAML file of 20,000 backends),
100,000 API keys, 2,000 model names; ``--scale F`` multiplies the sizes.

How the state is built (and why):
- backends: the YAML file is applied by the node itself (the web processes'
  and the tasks process's own ``config_sync`` at their first start): the
  real write path, and what the cold-start row measures;
- keys: 100,000 ``key_create`` calls (one transaction + revision bump + a
  snapshot reload in every web process each) would take hours, so the keys
  are bulk-inserted with the real model (``keys.models.ApiKey``) and the same
  field shapes ``keys.services`` writes (source ``operator``, hash-only via
  ``keys.keyring.hash_key``, ``mask_key`` hint, empty allow-lists), in one
  transaction with one ``bump_revision`` -- as a service would;
- every later change goes through the public write paths: ``key_revoke``,
  ``manage.py routerbackend add`` (``call_command``, the admin-side backend
  path), YAML file edits picked up by the tasks process's own watcher, and
  ``config_sync`` called in-process for the reconcile rows.

Two modes (``--mode yaml|router|both``):
- YAML: ``api_keys.mode: blocking``, operator keys; changes are key
  revocations, admin backend adds, YAML edits;
- ROUTER: the fake coordinator (fakes/coordinator, in this process, on its own
  Pub/Sub channel) holds 5,000 circuits x 4 routes and 2,000 publications;
  the fake's REST create path waits for one ack per circuit (5,000 applies in
  a row on the current code), so its state is seeded straight into its
  in-memory tables under its lock, after a seed registration of the
  authority (a ROUTER worker keeps one id per authority, so the node's own
  registration gets that id). The node builds its mirror with its own first
  pull. Keys: to keep a full run bounded, the fake's snapshot does not carry
  100,000 keys (one ~20 MB router-config answer, re-applied on every 200
  pull; not measured here): ROUTER mode uses ``--coord-keys`` (2,000 at full
  size) coordinator keys from the fake's snapshot plus bulk operator keys for
  the rest (the table prints the split).
  Every change goes through the fake's REST (route replace, publication PUT,
  key DELETE), i.e. the coordinator's events and the reconcile pull.

Active health probes are off (``health.enabled: false``) so 20,000 probes do
not measure the fake backends; all backend URLs point at a few fake backend
processes (fakes/openai_backend.py).

The node under test is started as ``manage.py runnode`` would: two separate
uvicorn web processes on two ports (so each is polled on its own), the Celery
worker (tasks) and beat, and in ROUTER mode the events process (``manage.py
runworker appproxy``); a temp ``ROUTER_VAR_DIR`` and a unique Redis
namespace (``ROUTER_REDIS_PREFIX``) per run. Every step has a time budget:
a step that cannot finish prints ``n/a (reason)`` or says what was capped.

The parent process runs one child process per database (Django is set up
once per process, with the node's DATABASE_URL) and merges their rows into
one table; ``--json FILE`` writes every raw number.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

FULL = {"backends": 20_000, "keys": 100_000, "models": 2_000}
SMALL = {"backends": 10, "keys": 100, "models": 5}
FAKE_BACKENDS = 3


# -- small helpers -------------------------------------------------------------------


# Row 3's writer, a process of its own: Django set up, "ready", then on "go"
# the burst back to back, of `routerbackend add`s (--burst-kind backends) or
# of `revokeapikey`s of the last keys (--burst-kind keys); each write the DB
# refused (SQLite: locked past its timeout) is retried twice and printed;
# last, the CPU seconds the burst took in this process ("cpu S").
BURST_WRITER = """
import io, os, sys
import django
django.setup()
from django.core.management import call_command
from django.db import OperationalError
kind, n, url, keys = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
print("ready", flush=True)
sys.stdin.readline()
cpu0 = sum(os.times()[:2])
for i in range(n):
    if kind == "keys":
        command = ("revokeapikey", "--name", f"scale-{keys - n + i:06d}")
    else:
        command = ("routerbackend", "add", "--name", f"scale-b3-{i}", "--url", url,
                   "--models", f"b3-{i}", "--weight", "100")
    for _ in range(3):
        try:
            call_command(*command, stdout=io.StringIO())
            break
        except OperationalError as exc:
            print(repr(exc), flush=True)
t = os.times()
print(f"cpu {t.user + t.system - cpu0}", flush=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """utime+stime of a process and its threads, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return pages * PAGE / 2**20


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def dist(values: list[float | None]) -> dict[str, Any]:
    """p50/p95/max of seconds (None = not visible within the timeout)."""
    seen = [v for v in values if v is not None]
    return {"n": len(values), "timeouts": len(values) - len(seen), "p50": pct(seen, 0.5), "p95": pct(seen, 0.95),
            "p99": pct(seen, 0.99), "max": max(seen) if seen else None}


def ms(v: float | None) -> str:
    return "-" if v is None else (f"{v * 1000:.0f}" if v >= 0.1 else f"{v * 1000:.1f}")


def fmt_dist(d: dict[str, Any], unit: str = "ms") -> str:
    if not d.get("n"):
        return "n/a (no samples)"
    if d["p50"] is None:
        return f"n/a (all {d['n']} timed out)"
    text = f"{ms(d['p50'])}/{ms(d['p95'])}/{ms(d['max'])} {unit}"
    if d["timeouts"]:
        text += f" ({d['timeouts']}/{d['n']} timed out)"
    return text


class Proc:
    """A child process in its own process group (stopped by its own id only)."""

    def __init__(self, name: str, cmd: list[str], env: dict, log: Path) -> None:
        self.name = name
        self.log = log
        self.p = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT,
                                  start_new_session=True)

    @property
    def pid(self) -> int:
        return self.p.pid

    def alive(self) -> bool:
        return self.p.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        if self.p.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.p.pid, signal.SIGTERM)
        try:
            self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(5)


# -- the child: one database ---------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.db = args.worker
        sizes = SMALL if args.small else {k: max(1, round(v * args.scale)) for k, v in FULL.items()}
        sizes["backends"] = max(4, sizes["backends"] - sizes["backends"] % 4)
        sizes["keys"] = max(sizes["keys"], args.reps * 2 + 10)
        self.sizes = sizes
        self.tmp = Path(tempfile.mkdtemp(prefix=f"router-scale-{self.db}-"))
        self.run_id = uuid.uuid4().hex[:10]
        self.pg_name = f"router_scale_{self.run_id}"
        self.yaml_path = self.tmp / "router.yaml"
        self.status_token = "scale-" + uuid.uuid4().hex
        self.results: dict[str, Any] = {"db": self.db, "sizes": sizes, "small": bool(args.small), "scale": args.scale}
        self.notes: list[str] = []
        self.procs: dict[str, Proc] = {}
        self.web_ports = [free_port(), free_port()]
        self.backend_ports = [free_port() for _ in range(FAKE_BACKENDS)]
        self.yaml_extra: list[str] = []  # backends appended by the YAML-edit step
        self.weight0 = 100
        self.plain: list[str] = []  # plaintexts of the first keys (the rest are hashes only)
        self.last_plain = ""

    # ---- environment ----
    def env(self) -> dict[str, str]:
        if self.db == "sqlite":
            url = f"sqlite:///{self.tmp / 'db.sqlite3'}"
        else:
            url = f"postgres://postgres@127.0.0.1:5432/{self.pg_name}"
        return {
            **os.environ,
            "DATABASE_URL": url,
            "ROUTER_VAR_DIR": str(self.tmp),
            "ROUTER_CONFIG": str(self.yaml_path),
            "ROUTER_REDIS_PREFIX": f"router-scale:{self.run_id}:",
            "ROUTER_LOG_LEVEL": self.args.log_level,
            "ROUTER_STATUS_TOKEN": self.status_token,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_SECRET_KEY": "scale-bench-" + self.run_id,
            "PYTHONUNBUFFERED": "1",
        }

    def create_database(self) -> None:
        if self.db != "postgres":
            return
        import psycopg

        with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.pg_name}"')

    def drop_database(self) -> None:
        if self.db != "postgres":
            return
        import psycopg

        with contextlib.suppress(Exception), psycopg.connect(
            "postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.pg_name}" WITH (FORCE)')

    def cleanup_redis(self) -> None:
        with contextlib.suppress(Exception):
            import redis

            r = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
            prefix = f"router-scale:{self.run_id}:"
            for key in r.scan_iter(match=prefix + "*", count=1000):
                r.delete(key)

    # ---- state ----
    def model_of(self, i: int) -> str:
        return f"m{(i // 4) % self.sizes['models']:05d}"

    def write_yaml(self) -> None:
        lines = ["backends:"]
        for i in range(self.sizes["backends"]):
            port = self.backend_ports[i % FAKE_BACKENDS]
            weight = self.weight0 if i == 0 else 100
            lines.append(f"  - {{name: c{i // 4:05d}-r{i % 4}, url: 'http://127.0.0.1:{port}', "
                         f"models: [{self.model_of(i)}], weight: {weight}}}")
        lines += self.yaml_extra
        lines += ["api_keys:", "  mode: blocking", "health:", "  enabled: false", ""]
        tmp = self.yaml_path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines))
        os.replace(tmp, self.yaml_path)  # the watcher never sees half a file

    def bulk_keys(self) -> float:
        from django.db import transaction

        from keys.keyring import hash_key, mask_key
        from keys.models import ApiKey, KeySource
        from keys.services import new_plaintext
        from router.revision import bump_revision

        t0 = time.perf_counter()
        n = self.sizes["keys"]
        with transaction.atomic():
            batch = []
            for i in range(n):
                plaintext = new_plaintext()
                if i < self.args.reps * 2 + 10:
                    self.plain.append(plaintext)
                if i == n - 1:
                    self.last_plain = plaintext  # row 3's key burst revokes the last keys, this one last
                batch.append(ApiKey(name=f"scale-{i:06d}", source=KeySource.OPERATOR, key_hash=hash_key(plaintext),
                                    hint=mask_key(plaintext), allowed_models=[], allowed_client_ips=[]))
                if len(batch) >= 5000:
                    ApiKey.objects.bulk_create(batch)
                    batch = []
            if batch:
                ApiKey.objects.bulk_create(batch)
            bump_revision(f"bench: {n} keys bulk-inserted")
        return time.perf_counter() - t0

    # ---- node processes ----
    def start_tasks(self) -> None:
        env = self.env()
        node = self.run_id
        self.procs["tasks"] = Proc("tasks", [PY, "-m", "celery", "-A", "config", "worker", "--pool", "threads",
                                             "--concurrency", "4", "--loglevel", "WARNING", "--without-mingle",
                                             "--without-gossip", "-n", f"tasks-{node}@%h"], env, self.tmp / "tasks.log")
        self.procs["beat"] = Proc("beat", [PY, "-m", "celery", "-A", "config", "beat", "--loglevel", "WARNING",
                                           "--schedule", str(self.tmp / "celerybeat-schedule")], env, self.tmp / "beat.log")

    def start_webs(self) -> None:
        env = self.env()
        for i, port in enumerate(self.web_ports):
            cmd = [PY, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1", "--port", str(port),
                   "--loop", "uvloop", "--http", "config.server:HttpToolsProtocol", "--no-access-log",
                   "--log-level", "warning", "--timeout-graceful-shutdown", "5", "--no-proxy-headers"]
            self.procs[f"web{i}"] = Proc(f"web{i}", cmd, env, self.tmp / f"web{i}.log")

    def stop_node(self) -> None:
        for name in ("web0", "web1", "beat", "tasks"):
            proc = self.procs.pop(name, None)
            if proc is not None:
                proc.stop()

    def web_pids(self) -> list[int]:
        return [self.procs["web0"].pid, self.procs["web1"].pid]

    # ---- HTTP ----
    def url(self, port: int, path: str) -> str:
        return f"http://127.0.0.1:{port}{path}"

    async def chat(self, s: aiohttp.ClientSession, port: int, model: str, key: str | None = None) -> int:
        body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
        headers = {"content-type": "application/json", "authorization": f"Bearer {key or self.plain[0]}"}
        try:
            async with s.post(self.url(port, "/v1/chat/completions"), data=body, headers=headers) as r:
                await r.read()
                return r.status
        except (aiohttp.ClientError, TimeoutError):
            return -1

    async def get_status(self, s: aiohttp.ClientSession, port: int, path: str, key: str | None = None) -> int:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        try:
            async with s.get(self.url(port, path), headers=headers) as r:
                await r.read()
                return r.status
        except (aiohttp.ClientError, TimeoutError):
            return -1

    async def visible(self, s: aiohttp.ClientSession, t0: float, probe, timeout: float) -> list[float | None]:
        """Seconds from t0 until probe(port) is true, per web process (poll ~5 ms)."""

        async def one(port: int) -> float | None:
            deadline = t0 + timeout
            while time.perf_counter() < deadline:
                if await probe(port):
                    return time.perf_counter() - t0
                await asyncio.sleep(0.005)
            return None

        return list(await asyncio.gather(*(one(p) for p in self.web_ports)))

    async def quiesce(self, timeout: float = 120.0) -> float:
        """Wait until the web processes are idle (< 20 % CPU over 0.5 s): a
        step never starts while the previous one's reloads still run."""
        t0 = time.perf_counter()
        # Web processes only: the tasks process is never idle on the current code
        # (router.probe_backends compiles a snapshot every 2 s).
        pids = self.web_pids()
        while time.perf_counter() - t0 < timeout:
            c0 = [cpu_seconds(p) for p in pids]
            await asyncio.sleep(0.5)
            if all(cpu_seconds(p) - c < 0.1 for p, c in zip(pids, c0, strict=True)):
                break
        return time.perf_counter() - t0

    def spy(self, label: str, *names: str) -> list[subprocess.Popen]:
        """--profile DIR: py-spy records node processes (the tasks process by
        default) through one row: DIR/<db>-<label>-<process>.txt, collapsed
        stacks — what the row spent their CPU on."""
        if not self.args.profile:
            return []
        spy_bin = Path(sys.executable).with_name("py-spy")
        out = Path(self.args.profile)
        out.mkdir(parents=True, exist_ok=True)
        tag = f"{self.args.worker}-{'small-' if self.args.small else ''}{label}"
        gil = ["--gil"] if self.args.profile_gil else []
        return [subprocess.Popen([str(spy_bin), "record", "-p", str(self.procs[name].pid), "-f", "raw", "-r", "250",
                                  *gil, "-o", str(out / f"{tag}-{name}.txt")],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for name in names or ("tasks",) if name in self.procs]

    @staticmethod
    def unspy(spies: list[subprocess.Popen]) -> None:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            with contextlib.suppress(subprocess.TimeoutExpired):
                spy.wait(timeout=30)

    # ---- steps ----
    async def cold_start(self, s: aiohttp.ClientSession, label: str) -> None:
        """Start both web processes; seconds to /readyz 200 and to a configured model routing."""
        timeout = self.args.start_timeout
        t0 = time.perf_counter()
        self.start_webs()
        spies = self.spy(label, *(n for n in self.procs if not n.startswith("backend")))
        last_model = self.model_of(self.sizes["backends"] - 1)

        async def ready(port: int) -> bool:
            return await self.get_status(s, port, "/readyz") == 200

        seen_status: dict[str, dict[str, int]] = {str(p): {} for p in self.web_ports}

        async def routable(port: int) -> bool:
            for model in (self.model_of(0), last_model):
                status = await self.chat(s, port, model)
                if status != 200:
                    if status > 0:  # what a client got (-1: nothing listening yet)
                        counts = seen_status[str(port)]
                        counts[str(status)] = counts.get(str(status), 0) + 1
                    return False
            return True

        seen_ready, seen_route = await asyncio.gather(self.visible(s, t0, ready, timeout),
                                                      self.visible(s, t0, routable, timeout))
        self.unspy(spies)
        row = {"readyz_s": seen_ready, "routable_s": seen_route, "timeout_s": timeout, "statuses_before": seen_status}
        if None not in seen_ready and None not in seen_route:
            row["gap_s"] = max(seen_route) - max(seen_ready)
        self.results[label] = row

    async def reconcile_in_process(self) -> None:
        """config_sync (the YAML writer) called here as the tasks process calls
        it, node stopped: CPU ms and rows written for a pull that finds nothing
        and one that finds one change."""
        from django.db import connection

        from router.services import config_sync

        class Counter:
            def __init__(self) -> None:
                self.statements = 0
                self.rows = 0
                self.writes = 0

            def __call__(self, execute, sql, params, many, context):
                result = execute(sql, params, many, context)
                self.statements += 1
                verb = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
                if verb in ("INSERT", "UPDATE", "DELETE"):
                    self.writes += 1
                    rc = getattr(context.get("cursor"), "rowcount", 0) or 0
                    self.rows += max(rc, 0)
                return result

        def measure(touch: bool) -> dict[str, Any]:
            if touch:
                self.weight0 = 101 if self.weight0 == 100 else 100
                self.write_yaml()
            counter = Counter()
            c0, w0 = time.process_time(), time.perf_counter()
            with connection.execute_wrapper(counter):
                changed = config_sync(self.yaml_path, incremental=True)
            return {"changed": changed, "cpu_ms": (time.process_time() - c0) * 1000,
                    "wall_ms": (time.perf_counter() - w0) * 1000, "statements": counter.statements,
                    "write_statements": counter.writes, "rows_written": counter.rows}

        # As the tasks process calls it: incremental, after its start-up parse
        # of the applied file (untimed here, as it is there).
        config_sync(self.yaml_path, incremental=True)
        self.results["reconcile_nothing"] = measure(False)
        self.results["reconcile_one"] = measure(True)

    def _reps(self, what: str):
        """range(--reps), cut short (with a note) once --step-budget is spent."""
        budget_end = time.perf_counter() + self.args.step_budget
        for i in range(self.args.reps):
            if time.perf_counter() > budget_end:
                self.notes.append(f"{what} capped at {i} of {self.args.reps} repetitions (step budget)")
                return
            yield i

    async def revocations(self, s: aiohttp.ClientSession) -> None:
        from keys.keyring import hash_key
        from keys.models import ApiKey
        from keys.services import key_revoke

        times: list[float | None] = []
        for i in self._reps("key revocation"):
            key = self.plain[i + 1]
            # the key works everywhere first (so the change is what we time)
            ok = await self.visible(s, time.perf_counter(),
                                    lambda p, k=key: self._status_is(s, p, self.model_of(0), k, 200), 30)
            if None in ok:
                times.append(None)
                continue
            row = ApiKey.objects.get(key_hash=hash_key(key))
            key_revoke(row)
            t0 = time.perf_counter()
            seen = await self.visible(s, t0, lambda p, k=key: self._status_is(s, p, self.model_of(0), k, 401),
                                      self.args.change_timeout)
            times.extend(seen)
        self.results["revoke"] = dist(times)

    async def _status_is(self, s, port, model, key, status) -> bool:
        return await self.chat(s, port, model, key) == status

    def admin_add(self, name: str, model: str, weight: int = 100, errors: list[str] | None = None) -> bool:
        """`manage.py routerbackend add`; a write the DB refuses (SQLite: locked
        past its 20 s timeout) is retried twice and counted in `errors`."""
        from django.core.management import call_command
        from django.db import OperationalError

        for _ in range(3):
            try:
                call_command("routerbackend", "add", "--name", name, "--url",
                             f"http://127.0.0.1:{self.backend_ports[0]}", "--models", model, "--weight", str(weight),
                             stdout=io.StringIO())
                return True
            except OperationalError as exc:
                if errors is None:
                    raise
                errors.append(repr(exc))
        return False

    async def backend_adds(self, s: aiohttp.ClientSession) -> None:
        times: list[float | None] = []
        for i in self._reps("backend add"):
            model = f"adm-{i}"
            self.admin_add(f"scale-adm-{i}", model)
            t0 = time.perf_counter()
            times.extend(await self.visible(s, t0, lambda p, m=model: self._status_is(s, p, m, None, 200),
                                            self.args.change_timeout))
        self.results["backend_add"] = dist(times)

    async def yaml_edits(self, s: aiohttp.ClientSession) -> None:
        times: list[float | None] = []
        commits: list[float | None] = []
        for i in self._reps("YAML edit"):
            model = f"ynew-{i}"
            self.yaml_extra.append(f"  - {{name: yaml-new-{i}, url: 'http://127.0.0.1:{self.backend_ports[1]}', "
                                   f"models: [{model}]}}")
            self.write_yaml()
            t0 = time.perf_counter()
            seen, commit = await asyncio.gather(
                self.visible(s, t0, lambda p, m=model: self._status_is(s, p, m, None, 200), self.args.yaml_timeout),
                asyncio.to_thread(self._committed, f"yaml-new-{i}", t0, self.args.yaml_timeout))
            times.extend(seen)
            commits.append(commit)
            if None in seen:  # the node is behind: the next edit would measure the backlog
                self.notes.append(f"YAML edit stopped after {i + 1} repetitions (one not visible in "
                                  f"{self.args.yaml_timeout:.0f} s)")
                break
        self.results["yaml_edit"] = dist(times)
        self.results["yaml_edit_commit"] = dist(commits)

    def _committed(self, name: str, t0: float, timeout: float) -> float | None:
        """Seconds from t0 until the tasks process committed backend `name`
        (this process polls the DB): the edit's own share of row 2d."""
        from django.db import close_old_connections

        from router.models import Backend

        try:
            while time.perf_counter() < t0 + timeout:
                if Backend.objects.filter(name=name).exists():
                    return time.perf_counter() - t0
                time.sleep(0.005)
            return None
        finally:
            close_old_connections()

    async def request_loop(self, s: aiohttp.ClientSession, port: int, stop: threading.Event | None,
                           duration: float, starts: list[float] | None = None) -> list[float]:
        """Latencies of one connection's requests, back to back (`starts`:
        each one's start, in the same order)."""
        lat: list[float] = []
        end = time.perf_counter() + duration
        model = self.model_of(0)
        while time.perf_counter() < end and not (stop is not None and stop.is_set()):
            t = time.perf_counter()
            status = await self.chat(s, port, model)
            if status == 200:
                lat.append(time.perf_counter() - t)
                if starts is not None:
                    starts.append(t)
        return lat

    async def loop_during_burst(self, s: aiohttp.ClientSession) -> None:
        """Row 3. The burst's writes run in a process of their own, as an
        operator's `manage.py routerbackend add` would: in a thread of this
        process they held its GIL for the ORM's work and delayed the very
        loop that measures the tail."""
        port = self.web_ports[0]
        n, kind = self.args.burst_changes, self.args.burst_kind
        if kind == "keys" and n > self.sizes["keys"] - len(self.plain):
            raise RuntimeError(f"--burst-kind keys: {n} revocations would reach the keys the other rows use")
        writer = subprocess.Popen(
            [PY, "-c", BURST_WRITER, kind, str(n), f"http://127.0.0.1:{self.backend_ports[0]}",
             str(self.sizes["keys"])],
            cwd=ROOT, env=dict(os.environ), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(self.tmp / "burst-writer.log", "wb"), text=True)
        errors: list[str] = []
        writer_cpu: float | None = None
        try:
            ready = await asyncio.to_thread(writer.stdout.readline)  # type: ignore[union-attr]
            if ready.strip() != "ready":
                raise RuntimeError(f"burst writer did not start (see {self.tmp / 'burst-writer.log'})")
            cpu0 = self._cpu_by_process()
            steady = await self.request_loop(s, port, None, self.args.loop_seconds)
            cpu1 = self._cpu_by_process()
            stop = threading.Event()
            t0 = time.perf_counter()
            writer.stdin.write("go\n")  # type: ignore[union-attr]
            writer.stdin.flush()  # type: ignore[union-attr]

            async def watcher() -> float | None:
                deadline = t0 + self.args.step_budget
                while writer.poll() is None and time.perf_counter() < deadline:
                    await asyncio.sleep(0.01)
                async def applied_yet() -> bool:
                    if kind == "keys":  # the last key revoked is refused
                        return await self.chat(s, port, self.model_of(0), self.last_plain) == 401
                    return await self.chat(s, port, f"b3-{n - 1}") == 200

                while time.perf_counter() < deadline:
                    if await applied_yet():
                        applied = time.perf_counter() - t0
                        # the loop runs at least as long as the steady one did
                        await asyncio.sleep(max(0.0, t0 + self.args.loop_seconds - time.perf_counter()))
                        stop.set()
                        return applied
                    await asyncio.sleep(0.05)
                stop.set()
                return None

            spies = self.spy("loop", "web0", "web1", "tasks")
            starts: list[float] = []
            during, applied = await asyncio.gather(
                self.request_loop(s, port, stop, self.args.step_budget + 5, starts), watcher())
            cpu2, window = self._cpu_by_process(), time.perf_counter() - t0
            self.unspy(spies)
            out, _ = await asyncio.to_thread(writer.communicate, None, 30)
            errors = [line for line in out.splitlines() if line.strip() and not line.startswith("cpu ")]
            writer_cpu = next((float(line[4:]) for line in out.splitlines() if line.startswith("cpu ")), None)
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait()
        sd, bd = dist(steady), dist(during)
        # only the requests that started while the changes were being applied
        # (the loop runs on for the rest of a steady window's length)
        inside = [x for x, t in zip(during, starts, strict=True) if applied is not None and t < t0 + applied]
        self.results["loop"] = {"steady": sd, "burst": bd, "inside": dist(inside), "burst_changes": n,
                                "burst_kind": kind,
                                "burst_applied_s": applied,
                                "errors": errors,
                                # CPU seconds per process in each window: who took the cores
                                "cpu_steady_s": {k: round(cpu1[k] - cpu0.get(k, 0.0), 3) for k in cpu1},
                                "cpu_burst_s": {k: round(cpu2[k] - cpu1[k], 3) for k in cpu1 if k in cpu2}
                                | {"writer": writer_cpu}, "burst_window_s": round(window, 2),
                                "ratio_p99": (bd["p99"] / sd["p99"]) if sd["p99"] and bd["p99"] else None}

    def _cpu_by_process(self) -> dict[str, float]:
        pids = {name: proc.pid for name, proc in self.procs.items()} | {"bench": os.getpid()}
        out = {}
        for name, pid in pids.items():
            with contextlib.suppress(OSError, ValueError):
                out[name] = cpu_seconds(pid)
        return out

    async def route_burst(self, s: aiohttp.ClientSession) -> None:
        n = self.args.burst_updates
        period = self.args.burst_seconds / n
        errors: list[str] = []
        t_start = time.perf_counter()
        t_last: list[float] = []
        committed: list[int] = []

        def burst() -> None:
            try:
                for i in range(n):
                    due = t_start + i * period
                    wait = due - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                    if self.admin_add(f"scale-b4-{i}", f"b4-{i}", errors=errors):
                        committed.append(i)
            except Exception as exc:
                errors.append(repr(exc))
            finally:
                t_last.append(time.perf_counter())

        await asyncio.to_thread(burst)
        sent_s = t_last[0] - t_start
        last = f"b4-{committed[-1] if committed else n - 1}"
        seen = await self.visible(s, t_last[0], lambda p: self._status_is(s, p, last, None, 200),
                                  self.args.burst_timeout)
        lost: list[int | None] = []
        for port in self.web_ports:
            try:
                async with s.get(self.url(port, "/v1/models"),
                                 headers={"authorization": f"Bearer {self.plain[0]}"}) as r:
                    names = {m["id"] for m in orjson.loads(await r.read())["data"]}
                lost.append(sum(1 for i in committed if f"b4-{i}" not in names))
            except Exception:
                lost.append(None)
        self.rss("rss_after")  # before anything restarts the web processes
        self.results["route_burst"] = {"updates": n, "committed": len(committed), "sent_s": sent_s, "after_last_s": seen, "lost": lost,
                                       "errors": errors, "timeout_s": self.args.burst_timeout}

    async def cpu_per_request(self, s: aiohttp.ClientSession) -> None:
        port, pid = self.web_ports[0], self.web_pids()[0]
        conns, duration = 8, self.args.loop_seconds
        body = orjson.dumps({"model": self.model_of(0), "messages": [{"role": "user", "content": "hi"}]})
        headers = {"content-type": "application/json", "authorization": f"Bearer {self.plain[0]}"}
        count = 0

        async def worker(end: float) -> None:
            nonlocal count
            while time.perf_counter() < end:
                try:
                    async with s.post(self.url(port, "/v1/chat/completions"), data=body, headers=headers) as r:
                        await r.read()
                        count += r.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    pass

        # what web0 spends with no request at all (timers, notices, the
        # other processes' heartbeats): a cost that grows with the cluster
        # would show here, not in the requests
        spies = self.spy("idle", "web0")
        i0, t_idle = cpu_seconds(pid), time.perf_counter()
        await asyncio.sleep(3.0)
        idle_ms_per_s = (cpu_seconds(pid) - i0) * 1000 / (time.perf_counter() - t_idle)
        self.unspy(spies)
        end = time.perf_counter() + 1.0
        await asyncio.gather(*(worker(end) for _ in range(conns)))  # warm up
        count = 0
        spies = self.spy("load", "web0")  # (py-spy's sampling adds to the figure: a profile run's is not one to quote)
        c0 = cpu_seconds(pid)
        end = time.perf_counter() + duration
        await asyncio.gather(*(worker(end) for _ in range(conns)))
        c1 = cpu_seconds(pid)
        self.unspy(spies)
        models_lat: list[float] = []
        m0 = cpu_seconds(pid)
        for _ in range(200):
            t = time.perf_counter()
            if await self.get_status(s, port, "/v1/models", self.plain[0]) == 200:
                models_lat.append(time.perf_counter() - t)
        self.results["cpu"] = {"requests": count, "connections": conns,
                               "cpu_ms_per_req": (c1 - c0) * 1000 / count if count else None,
                               "idle_cpu_ms_per_s": idle_ms_per_s,
                               "models_p50_s": pct(models_lat, 0.5), "models_n": len(models_lat),
                               "models_cpu_ms": (cpu_seconds(pid) - m0) * 1000 / max(1, len(models_lat))}

    def rss(self, label: str) -> None:
        self.results[label] = {f"web{i}": rss_mb(pid) for i, pid in enumerate(self.web_pids())}

    # ---- the run ----
    async def run(self) -> dict[str, Any]:
        env = self.env()
        t_all = time.perf_counter()
        try:
            self.create_database()
            for k, v in env.items():
                os.environ[k] = v
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # sync ORM calls from this bench's loop
            t0 = time.perf_counter()
            self.write_yaml()  # before migrate: its system check wants the file
            self.results["build_yaml_write_s"] = time.perf_counter() - t0
            subprocess.run([PY, "manage.py", "migrate", "-v0"], env=env, cwd=ROOT, check=True)
            import django

            django.setup()
            for i, port in enumerate(self.backend_ports):
                self.procs[f"backend{i}"] = Proc(f"backend{i}", [PY, "-m", "fakes.openai_backend", "--port", str(port),
                                                                 "--name", f"fake-{i}", "--models", "x",
                                                                 "--chunks", "5", "--chunk-delay", "0", "--quiet"],
                                                 env, self.tmp / f"backend{i}.log")
            self.results["build_keys_s"] = self.bulk_keys()
            timeout = aiohttp.ClientTimeout(total=30)
            connector = aiohttp.TCPConnector(limit=64)
            async with aiohttp.ClientSession(timeout=timeout, connector=connector) as s:
                # 1. first boot: the node applies the YAML itself (tasks + both webs at once)
                self.start_tasks()
                await self.step("cold_first", self.cold_start(s, "cold_first"))
                self.stop_node()
                # 5. reconcile, in-process, node stopped
                await self.step("reconcile", self.reconcile_in_process())
                # 1. restart: the state is already in the DB
                self.start_tasks()
                await self.step("cold_restart", self.cold_start(s, "cold_restart"))
                if not all(p.alive() for p in self.procs.values()):
                    raise RuntimeError("a node process died: " + ", ".join(
                        n for n, p in self.procs.items() if not p.alive()))
                await self.quiesce()
                self.rss("rss_start")
                await self.step("cpu", self.cpu_per_request(s))
                if not self.args.basic:
                    for name, step in (("revoke", self.revocations), ("backend_add", self.backend_adds),
                                       ("yaml_edit", self.yaml_edits), ("loop", self.loop_during_burst),
                                       ("route_burst", self.route_burst)):
                        await self.settle(s, name)
                        await self.step(name, step(s))
                    if "rss_after" not in self.results:
                        self.rss("rss_after")
        finally:
            self.teardown()
        self.results["notes"] = self.notes
        self.results["total_s"] = time.perf_counter() - t_all
        return self.results

    def teardown(self) -> None:
        """Stop every process this run started, drop its database, Redis keys and temp dir."""
        self.stop_node()
        for name in list(self.procs):
            self.procs.pop(name).stop()
        self.stop_peers()
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        self.drop_database()
        self.cleanup_redis()
        if self.args.keep:
            self.notes.append(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def stop_peers(self) -> None:
        """What a mode runs beside the node (ROUTER: the fake coordinator)."""

    async def settle(self, s: aiohttp.ClientSession, before: str) -> None:
        """Idle web processes before a step; a reload backlog the previous step
        left (one reload per change notice) is cut short by restarting them."""
        waited = await self.quiesce(self.args.settle_timeout)
        if waited < self.args.settle_timeout:
            if waited > 10:
                self.notes.append(f"waited {waited:.0f} s for the web processes to go idle before {before}")
            return
        self.notes.append(f"web processes still busy {waited:.0f} s after the step before {before} "
                          "(reload backlog): restarted them")
        for name in ("web0", "web1"):
            self.procs.pop(name).stop()
        await self.cold_start(s, f"restart_before_{before}")
        await self.quiesce(self.args.settle_timeout)

    async def step(self, name: str, coro) -> None:
        t0 = time.perf_counter()
        try:
            await asyncio.wait_for(coro, self.args.step_budget + 300)
        except Exception as exc:
            self.results.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"[:300]
        self.results.setdefault("step_s", {})[name] = time.perf_counter() - t0
        with contextlib.suppress(Exception):  # where row 7's growth happened
            self.results.setdefault("rss_steps", {})[name] = [rss_mb(pid) for pid in self.web_pids()]


class RouterBench(Bench):
    """ROUTER mode: the same node plus the events process, against the fake
    coordinator (fakes/coordinator) run in this process on its own channel.

    The fake's state (5,000 circuits x 4 routes, 2,000 publications, the
    coordinator keys) is seeded straight into its in-memory state under its
    lock -- its REST create path waits for one ack per circuit, 5,000 applies
    in a row -- after a seed registration of the authority (a ROUTER worker
    keeps one id per authority, so the node's own registration gets it). The
    node then builds its mirror through its own first pull. Every change
    after that goes through the fake's REST (route replace, publication PUT,
    key DELETE), i.e. the coordinator's events and pulls.
    """

    def stop_peers(self) -> None:
        if self._fake_client is not None:
            self._fake_client.close()
        if self.fake is not None:
            with contextlib.suppress(Exception):
                self.fake.stop()

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        n = self.sizes["keys"]
        self.sizes["coordinator_keys"] = min(n // 2, max(self.args.reps + 5, round(args.coord_keys * args.scale)))
        self.sizes["operator_keys"] = n - self.sizes["coordinator_keys"]
        self.authority = f"scale-{self.run_id}"
        self.channel = f"router-scale-{self.run_id}-events"
        self.secret = "scale-api-secret-" + self.run_id
        self.node_id = str(uuid.uuid4())
        self.fake = None
        self._fake_client = None
        self.worker_id = ""
        self.circuits: list[tuple[str, str]] = []  # (endpoint_id, circuit_id)
        self.probe_ep = ""
        self.probe_cid = ""
        self.dead_port = free_port()  # nothing listens here
        self.coord_plain: list[str] = []
        self.results["mode"] = "router"

    def env(self) -> dict[str, str]:
        return {**super().env(), "APPPROXY_NODE_ID": self.node_id, "APPPROXY_API_SECRET": self.secret}

    def write_yaml(self) -> None:
        lines = ["backends:" if self.yaml_extra else "backends: []", *self.yaml_extra]
        port = self.fake.port if self.fake is not None else 1
        lines += ["appproxy_router:", "  enabled: true", f"  coordinator_url: 'http://127.0.0.1:{port}'",
                  "  api_secret: ${APPPROXY_API_SECRET}",
                  f"  redis_url: '{os.environ.get('REDIS_URL', 'redis://127.0.0.1:6379/0')}'",
                  f"  authority: {self.authority}", "  hostname: 127.0.0.1", f"  api_port: {self.web_ports[0]}",
                  f"  reconcile_interval: '{self.args.reconcile_interval:.0f}s'", "  heartbeat_period: '5s'",
                  f"  channel: {self.channel}", "health:", "  enabled: false", ""]
        tmp = self.yaml_path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines))
        os.replace(tmp, self.yaml_path)

    def start_tasks(self) -> None:
        super().start_tasks()
        self.procs["events"] = Proc("events", [PY, "manage.py", "runworker", "appproxy"], self.env(),
                                    self.tmp / "events.log")

    def stop_node(self) -> None:
        super().stop_node()
        proc = self.procs.pop("events", None)
        if proc is not None:
            proc.stop()

    # ---- the fake coordinator ----
    def start_fake(self) -> None:
        from fakes.coordinator.server import FakeCoordinator

        self.fake = FakeCoordinator(api_secret=self.secret, jwt_secret="scale-jwt-" + self.run_id,
                                    redis_url=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
                                    channel=self.channel, ack_timeout=self.args.ack_timeout,
                                    heartbeat_timeout=3600, lost_check_interval=3600).start()

    def fake_http(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        # One client for the run: httpx.request() builds a client (and its TLS
        # context) per call, ~45 ms here, which paced row 4's "1,000 in 10 s"
        # at 46 s.
        import httpx

        if self._fake_client is None:
            self._fake_client = httpx.Client(timeout=60, headers={"X-BackendAI-Token": self.secret})
        r = self._fake_client.request(method, self.fake.url + path, json=body)
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, None

    def route(self, port: int) -> dict[str, Any]:
        return {"session_id": str(uuid.uuid4()), "route_id": str(uuid.uuid4()), "kernel_host": "127.0.0.1",
                "kernel_port": port}

    def seed_fake(self) -> float:
        from fakes.coordinator.state import now_iso

        t0 = time.perf_counter()
        status, body = self.fake_http("PUT", "/api/worker", {
            "authority": self.authority, "frontend_mode": "router", "protocol": "http", "hostname": "127.0.0.1",
            "tls_listen": False, "tls_advertised": False, "api_port": self.web_ports[0],
            "filtered_apps_only": False, "accepted_traffics": ["inference"], "node_id": "scale-seed"})
        if status != 200:
            raise RuntimeError(f"seed registration: {status} {body}")
        self.worker_id = body["id"]
        from keys.keyring import hash_key
        from keys.services import new_plaintext

        state = self.fake.state
        n_circuits = self.sizes["backends"] // 4
        by_model: dict[str, list[str]] = {}
        with state.lock:
            worker = state.workers[self.worker_id]
            for c in range(n_circuits + 1):  # the last one is the probe circuit
                ep, cid, now = str(uuid.uuid4()), str(uuid.uuid4()), now_iso()
                probe = c == n_circuits
                routes = ([self.route(self.backend_ports[0])] if probe else
                          [self.route(self.backend_ports[(c * 4 + r) % FAKE_BACKENDS]) for r in range(4)])
                for row in routes:
                    row.update(session_name=None, protocol="http", traffic_ratio=1.0)
                state.circuits[cid] = {
                    "id": cid, "app": f"svc-{c}", "protocol": "http", "worker": self.worker_id,
                    "app_mode": "inference", "frontend_mode": "router", "envs": {}, "arguments": None,
                    "open_to_public": False, "allowed_client_ips": None, "port": None, "subdomain": None,
                    "user_id": str(uuid.uuid4()), "endpoint_id": ep, "runtime_variant": "vllm",
                    "route_info": routes, "session_ids": [], "created_at": now, "updated_at": now}
                state.endpoints[ep] = {"circuit_id": cid, "health_check_enabled": False, "health_check": None}
                worker["occupied_slots"] += 1
                if probe:
                    self.probe_ep, self.probe_cid = ep, cid
                    by_model["probe-model"] = [ep]
                else:
                    self.circuits.append((ep, cid))
                    by_model.setdefault(self.model_of(c * 4), []).append(ep)
            auth = state.router.of(self.authority)
            for name, eps in by_model.items():
                auth.models[name] = {"model": name, "aliases": [], "control_mode": "manual",
                                     "mappings": [{"endpoint_id": ep, "ratio": 1.0} for ep in eps]}
            for i in range(self.sizes["coordinator_keys"]):
                plaintext = new_plaintext()
                if i < self.args.reps + 5:
                    self.coord_plain.append(plaintext)
                auth.keys[f"ck-{i:06d}"] = {"key_id": f"ck-{i:06d}", "token_hash": hash_key(plaintext),
                                           "display_hint": plaintext[-4:], "allowed_models": [], "expires_at": None,
                                           "rate_limit": None, "allowed_client_ips": None}
            auth.bump()
        return time.perf_counter() - t0

    def pulls(self) -> int:
        with self.fake.state.lock:
            return sum(self.fake.state.router.pulls.get(self.worker_id, {}).values())

    # ---- steps ----
    async def coordinator_key_deletes(self, s: aiohttp.ClientSession) -> None:
        times: list[float | None] = []
        for i in self._reps("coordinator key delete"):
            key = self.coord_plain[i]
            ok = await self.visible(s, time.perf_counter(),
                                    lambda p, k=key: self._status_is(s, p, "probe-model", k, 200), 30)
            if None in ok:
                times.append(None)
                continue
            t0 = time.perf_counter()  # the fake commits at receipt, then publishes and waits for an ack
            await asyncio.to_thread(self.fake_http, "DELETE", f"/v2/routers/{self.authority}/api-keys/ck-{i:06d}")
            times.extend(await self.visible(s, t0, lambda p, k=key: self._status_is(s, p, "probe-model", k, 401),
                                            self.args.change_timeout))
        self.results["coord_key_delete"] = dist(times)

    def replace_routes(self, ep: str, ports: list[int]) -> list[str]:
        routes = [self.route(p) for p in ports]
        status, body = self.fake_http("POST", "/v2/endpoints/bulk/routes",
                                      {"endpoints": [{"deployment_id": ep, "routes": routes}]})
        if status != 200 or not body["endpoints"][0]["success"]:
            raise RuntimeError(f"route replace: {status} {body}")
        return [r["route_id"] for r in routes]

    async def probe_is(self, s: aiohttp.ClientSession, port: int, good: bool) -> bool:
        status = await self.chat(s, port, "probe-model")
        return status == 200 if good else status not in (200, -1)

    async def route_updates(self, s: aiohttp.ClientSession) -> None:
        """Replace the probe circuit's route: a dead port (answers 5xx), then a live one (200)."""
        times: list[float | None] = []
        spies = self.spy("route_update", "events", "web0", "web1")
        for i in self._reps("ROUTER route update"):
            good = i % 2 == 1
            await asyncio.to_thread(self.replace_routes, self.probe_ep,
                                    [self.backend_ports[0] if good else self.dead_port])
            t0 = time.perf_counter()
            seen = await self.visible(s, t0, lambda p, g=good: self.probe_is(s, p, g), self.args.change_timeout)
            times.extend(seen)
        if self.args.reps % 2 == 1:  # leave the probe routable
            await asyncio.to_thread(self.replace_routes, self.probe_ep, [self.backend_ports[0]])
            await self.visible(s, time.perf_counter(), lambda p: self.probe_is(s, p, True), self.args.change_timeout)
        self.unspy(spies)
        self.results["route_update"] = dist(times)

    async def publication_edits(self, s: aiohttp.ClientSession) -> None:
        times: list[float | None] = []
        puts: list[float] = []
        for i in self._reps("publication edit"):
            name = f"pub-{i}"
            t0 = time.perf_counter()  # the fake commits at receipt; the PUT returns after the first ack
            await asyncio.to_thread(self.fake_http, "PUT", f"/v2/routers/{self.authority}/models/{name}",
                                    {"aliases": [], "control_mode": "manual",
                                     "mappings": [{"endpoint_id": self.probe_ep, "ratio": 1.0}]})
            puts.append(time.perf_counter() - t0)
            times.extend(await self.visible(s, t0, lambda p, m=name: self._status_is(s, p, m, None, 200),
                                            self.args.change_timeout))
        self.results["publication"] = {**dist(times), "put_p50": pct(puts, 0.5)}

    async def route_burst(self, s: aiohttp.ClientSession) -> None:
        """1,000 route replaces (new route ids) on distinct circuits in 10 s; the
        last one brings the probe back from a dead port; then /status checks
        every replaced route is a backend in each web process."""
        await asyncio.to_thread(self.replace_routes, self.probe_ep, [self.dead_port])
        await self.visible(s, time.perf_counter(), lambda p: self.probe_is(s, p, False), self.args.change_timeout)
        n = self.args.burst_updates
        period = self.args.burst_seconds / n
        targets = [self.circuits[i % len(self.circuits)] for i in range(n - 1)]
        wanted: dict[str, list[str]] = {}
        errors: list[str] = []
        t_start = time.perf_counter()

        def burst() -> None:
            try:
                for i, (ep, cid) in enumerate(targets):
                    wait = t_start + i * period - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                    ports = [self.backend_ports[(i + r) % FAKE_BACKENDS] for r in range(4)]
                    wanted[cid] = self.replace_routes(ep, ports)
                wait = t_start + (n - 1) * period - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                self.replace_routes(self.probe_ep, [self.backend_ports[0]])
            except Exception as exc:
                errors.append(repr(exc))

        await asyncio.to_thread(burst)
        t_last = time.perf_counter()
        seen = await self.visible(s, t_last, lambda p: self.probe_is(s, p, True), self.args.burst_timeout)
        self.rss("rss_after")  # before the full /status listings below
        lost: list[int | None] = []
        for port in self.web_ports:
            try:
                async with s.get(self.url(port, "/status?backends=all"), timeout=aiohttp.ClientTimeout(total=120),
                                 headers={"authorization": f"Bearer {self.status_token}"}) as r:
                    names = {b["name"] for b in orjson.loads(await r.read())["backends"]}
                lost.append(sum(1 for cid, routes in wanted.items()
                                if not all(f"appproxy-{cid}-r{rid}" in names for rid in routes)))
            except Exception:
                lost.append(None)
        self.results["route_burst"] = {"updates": n, "sent_s": t_last - t_start, "after_last_s": seen, "lost": lost,
                                       "errors": errors, "timeout_s": self.args.burst_timeout,
                                       "distinct_circuits": len(wanted)}

    async def pull_cost(self, label: str, change: bool) -> None:
        """One reconcile pull of the tasks process (the fake counts it): its CPU
        from just before the pull until it is idle again, and (PostgreSQL) the
        rows every node process wrote meanwhile (pg_stat_user_tables)."""
        pid = self.procs["tasks"].pid
        last_at = (await self.pull_report()).get("last_pull_at")
        if not change:
            # The first pull after the events process applied changes finds
            # the mirror changed since this process last pulled and compares
            # it in full; "nothing changed" is the pull after that one.
            n0 = self.pulls()
            deadline = time.perf_counter() + self.args.reconcile_interval * 2 + 30
            while self.pulls() == n0 and time.perf_counter() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # let that pull finish
        rows0 = self.pg_rows()
        spy = self.spy(label)
        if change:  # one route's traffic ratio, no event: only the pull sees it
            with self.fake.state.lock:
                self.fake.state.circuits[self.circuits[0][1]]["route_info"][0]["traffic_ratio"] = 0.5
        n0 = self.pulls()
        samples: list[tuple[float, float]] = []
        deadline = time.perf_counter() + self.args.reconcile_interval * 2 + 30
        while self.pulls() == n0 and time.perf_counter() < deadline:
            samples.append((time.perf_counter(), cpu_seconds(pid)))
            await asyncio.sleep(0.05)
        if self.pulls() == n0:
            self.results[label] = {"error": "no pull seen"}
            return
        t_pull = time.perf_counter()
        t_before, before = next(((t, c) for t, c in reversed(samples) if t <= t_pull - 1.0),
                                samples[0] if samples else (t_pull, cpu_seconds(pid)))
        # The tasks process is not idle between pulls (beat ticks; on the current
        # code router.probe_backends compiles a whole snapshot every 2 s), so the
        # pull's cost is its CPU above the rate measured in the seconds before it.
        base = [(t, c) for t, c in samples if t <= t_before]
        rate = (base[-1][1] - base[0][1]) / (base[-1][0] - base[0][0]) if len(base) > 10 else 0.0
        last, t_last = cpu_seconds(pid), time.perf_counter()
        while time.perf_counter() - t_pull < 60:
            await asyncio.sleep(1.0)
            now, t_now = cpu_seconds(pid), time.perf_counter()
            if now - last <= rate * (t_now - t_last) * 1.2 + 0.03:
                break
            last, t_last = now, t_now
        end, t_end = cpu_seconds(pid), time.perf_counter()
        self.unspy(spy)
        await asyncio.sleep(1.5)  # PostgreSQL flushes its table counters about once a second
        rows1 = self.pg_rows()
        # The node's own account of the pull (/status: the CPU of the thread
        # that ran it), once /status shows a pull after the one before.
        report: dict[str, Any] = {}
        deadline = time.perf_counter() + 30
        while time.perf_counter() < deadline:
            report = await self.pull_report()
            if report.get("last_pull_at") not in (None, last_at):
                break
            await asyncio.sleep(0.5)
        self.results[label] = {"cpu_ms": max(0.0, (end - before) - rate * (t_end - t_before)) * 1000,
                               "baseline_cpu_pct": rate * 100, "busy_s": t_end - t_pull,
                               "own_cpu_ms": report.get("last_pull_cpu_ms"),
                               "last_pull_result": report.get("last_pull_result"),
                               "rows_written": (rows1 - rows0) if rows0 is not None and rows1 is not None else None}

    async def pull_report(self) -> dict[str, Any]:
        """/status's appproxy_router section of web0 (pull time, result, CPU)."""
        try:
            async with aiohttp.ClientSession() as s, s.get(
                self.url(self.web_ports[0], "/status"), timeout=aiohttp.ClientTimeout(total=30),
                headers={"authorization": f"Bearer {self.status_token}"},
            ) as r:
                return (orjson.loads(await r.read()).get("appproxy_router") or {})
        except Exception:
            return {}

    def pg_rows(self) -> int | None:
        if self.db != "postgres":
            return None
        import psycopg

        with psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{self.pg_name}", autocommit=True) as conn:
            row = conn.execute("SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) "
                               "FROM pg_stat_user_tables").fetchone()
            return int(row[0])

    async def run(self) -> dict[str, Any]:
        env = self.env()
        t_all = time.perf_counter()
        try:
            self.create_database()
            for k, v in env.items():
                os.environ[k] = v
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
            self.start_fake()
            self.write_yaml()
            subprocess.run([PY, "manage.py", "migrate", "-v0"], env=env, cwd=ROOT, check=True)
            import django

            django.setup()
            for i, port in enumerate(self.backend_ports):
                self.procs[f"backend{i}"] = Proc(f"backend{i}", [PY, "-m", "fakes.openai_backend", "--port", str(port),
                                                                 "--name", f"fake-{i}", "--models", "x",
                                                                 "--chunks", "5", "--chunk-delay", "0", "--quiet"],
                                                 env, self.tmp / f"backend{i}.log")
            n_keys = self.sizes["keys"]
            self.sizes["keys"] = self.sizes["operator_keys"]
            self.results["build_keys_s"] = self.bulk_keys()
            self.sizes["keys"] = n_keys
            self.results["build_fake_s"] = self.seed_fake()
            timeout = aiohttp.ClientTimeout(total=30)
            async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=64)) as s:
                self.start_tasks()
                await self.step("cold_first", self.cold_start(s, "cold_first"))
                if "cold_first" in self.results:  # the first pull's own CPU (its thread), as /status tells it
                    self.results["cold_first"]["pull_cpu_ms"] = (await self.pull_report()).get("last_pull_cpu_ms")
                self.stop_node()
                self.start_tasks()
                await self.step("cold_restart", self.cold_start(s, "cold_restart"))
                if not all(p.alive() for p in self.procs.values()):
                    raise RuntimeError("a node process died: " + ", ".join(
                        n for n, p in self.procs.items() if not p.alive()))
                await self.quiesce()
                self.rss("rss_start")
                await self.step("cpu", self.cpu_per_request(s))
                if not self.args.basic:
                    await self.step("reconcile", self.pull_cost("reconcile_nothing", False))
                    await self.step("reconcile", self.pull_cost("reconcile_one", True))
                    for name, step in (("revoke", self.coordinator_key_deletes), ("backend_add", self.route_updates),
                                       ("publication", self.publication_edits), ("route_burst", self.route_burst)):
                        await self.settle(s, name)
                        await self.step(name, step(s))
        finally:
            self.teardown()
        self.results["notes"] = self.notes
        self.results["total_s"] = time.perf_counter() - t_all
        return self.results


# -- the parent: one child per database, one table -------------------------------------


def rows_of(r: dict[str, Any] | None, small: dict[str, Any] | None) -> dict[str, str]:
    """Display strings of one database's results (key → cell)."""
    if r is None:
        return {}
    err = r.get("errors", {})
    out: dict[str, str] = {}

    def na(step: str) -> str:
        return f"n/a ({err[step]})" if step in err else "n/a (not measured)"

    for label in ("cold_first", "cold_restart"):
        c = r.get(label)
        if c:
            rd = [v for v in c["readyz_s"] if v is not None]
            ro = [v for v in c["routable_s"] if v is not None]
            out[f"{label}_ready"] = f"{max(rd):.1f} s" if len(rd) == 2 else f"n/a (not 200 in {c['timeout_s']:.0f} s)"
            if c.get("pull_cpu_ms") is not None:
                out[f"{label}_ready"] += f" (the pull: {c['pull_cpu_ms']:,.0f} ms CPU)"
            out[f"{label}_route"] = f"{max(ro):.1f} s" if len(ro) == 2 else f"n/a (not 200 in {c['timeout_s']:.0f} s)"
            out[f"{label}_gap"] = f"{c['gap_s']:.1f} s" if "gap_s" in c else "n/a"
            before = {}
            for counts in c.get("statuses_before", {}).values():
                for status, k in counts.items():
                    before[status] = before.get(status, 0) + k
            if before:
                out[f"{label}_gap"] += " (answers before: " + ", ".join(
                    f"{k}x{st}" for st, k in sorted(before.items())) + ")"
        else:
            out[f"{label}_ready"] = out[f"{label}_route"] = out[f"{label}_gap"] = na(label)
    for key in ("revoke", "backend_add", "yaml_edit", "yaml_edit_commit"):
        out[key] = fmt_dist(r[key]) if key in r else na(key)
    if r.get("mode") == "router":
        out["revoke"] = fmt_dist(r["coord_key_delete"]) if "coord_key_delete" in r else na("revoke")
        out["backend_add"] = fmt_dist(r["route_update"]) if "route_update" in r else na("backend_add")
        pub = r.get("publication")
        out["publication"] = (fmt_dist(pub) + (f" (PUT p50 {ms(pub['put_p50'])} ms)" if pub.get("put_p50") else "")
                              if pub else na("publication"))
        out["yaml_edit"] = out["yaml_edit_commit"] = "n/a (measured in YAML mode)"
        for key in ("reconcile_nothing", "reconcile_one"):
            x = r.get(key)
            label = "rec_nothing" if key == "reconcile_nothing" else "rec_one"
            if x and "cpu_ms" in x:
                rows = "rows n/a on SQLite" if x["rows_written"] is None else f"{x['rows_written']} rows (all processes)"
                own = x.get("own_cpu_ms")
                out[label] = ((f"{own:.0f} ms CPU (the pull's thread); " if own is not None else "")
                              + f"tasks {x['cpu_ms']:.0f} ms above its {x.get('baseline_cpu_pct', 0):.0f} % "
                              f"baseline; {rows}")
            else:
                out[label] = f"n/a ({(x or {}).get('error') or err.get('reconcile', 'not measured')})"
    else:
        out["publication"] = "n/a (ROUTER mode only)"
    loop = r.get("loop")
    if loop:
        sd, bd = loop["steady"], loop["burst"]
        out["loop_steady"] = f"{ms(sd['p50'])}/{ms(sd['p99'])}/{ms(sd['max'])} ms"
        applied = f"{loop['burst_applied_s']:.1f} s" if loop["burst_applied_s"] is not None else "not applied"
        what = "key revocations" if loop.get("burst_kind") == "keys" else "backend adds"
        out["loop_burst"] = (f"{ms(bd['p50'])}/{ms(bd['p99'])}/{ms(bd['max'])} ms "
                             f"({loop['burst_changes']} {what}, applied after {applied})")
        inside = loop.get("inside") or {}
        out["loop_inside"] = (f"{ms(inside['p50'])}/{ms(inside['p95'])}/{ms(inside['p99'])} ms ({inside['n']} requests; "
                              f"p99 {inside['p99'] / sd['p99']:.1f}x the no-change p99)"
                              if inside.get("p99") and sd["p99"] else "n/a")
        out["loop_ratio"] = f"{loop['ratio_p99']:.1f}x" if loop["ratio_p99"] else "n/a"
        if loop.get("errors"):
            out["loop_ratio"] += f" ({len(loop['errors'])} write errors: {loop['errors'][0][:60]})"
    elif r.get("mode") == "router":
        out["loop_steady"] = out["loop_burst"] = out["loop_inside"] = out["loop_ratio"] = "n/a (measured in YAML mode)"
    else:
        out["loop_steady"] = out["loop_burst"] = out["loop_inside"] = out["loop_ratio"] = na("loop")
    b = r.get("route_burst")
    if b:
        seen = b["after_last_s"]
        when = (f"{max(seen):.1f} s" if None not in seen
                else f"n/a (not applied in {b['timeout_s']:.0f} s after the last)")
        out["burst_applied"] = f"{when} (sent in {b['sent_s']:.1f} s)"
        out["burst_lost"] = "/".join("?" if x is None else str(x) for x in b["lost"]) + (
            f" of {b.get('committed', b.get('distinct_circuits', b['updates']))} committed")
        if b.get("errors"):
            out["burst_lost"] += f" ({len(b['errors'])} write errors: {b['errors'][0][:60]})"
    else:
        out["burst_applied"] = out["burst_lost"] = na("route_burst")
    for key, label in (("reconcile_nothing", "rec_nothing"), ("reconcile_one", "rec_one")):
        x = r.get(key)
        if r.get("mode") != "router":
            out[label] = (f"{x['cpu_ms']:.0f} ms CPU, {x['rows_written']} rows ({x['write_statements']} writes)"
                          if x else na("reconcile"))
    cpu = r.get("cpu")
    scpu = (small or {}).get("cpu") or {}
    if cpu:
        out["cpu_req"] = (f"{cpu['cpu_ms_per_req']:.2f} ms" if cpu["cpu_ms_per_req"] else "n/a") + (
            f" (small: {scpu['cpu_ms_per_req']:.2f})" if scpu.get("cpu_ms_per_req") else "") + (
            f"; idle {cpu['idle_cpu_ms_per_s']:.1f} ms/s" if cpu.get("idle_cpu_ms_per_s") is not None else "") + (
            f" (small: {scpu['idle_cpu_ms_per_s']:.1f})" if scpu.get("idle_cpu_ms_per_s") is not None else "")
        out["models_p50"] = ms(cpu["models_p50_s"]) + " ms" + (
            f" (small: {ms(scpu['models_p50_s'])})" if scpu.get("models_p50_s") else "")
    else:
        out["cpu_req"] = out["models_p50"] = na("cpu")
    for key, label in (("rss_start", "rss_start"), ("rss_after", "rss_after")):
        x = r.get(key)
        out[label] = " / ".join(f"{v:.0f}" for v in x.values()) + " MB" if x else "n/a"
    return out


LABELS = [
    ("cold_first_ready", "1 first boot (node applies YAML): /readyz 200"),
    ("cold_first_route", "1 first boot: configured models routable"),
    ("cold_first_gap", "1 first boot: routable minus readyz"),
    ("cold_restart_ready", "1 restart (state in DB): /readyz 200"),
    ("cold_restart_route", "1 restart: configured models routable"),
    ("cold_restart_gap", "1 restart: routable minus readyz"),
    ("revoke", "2a key revoke -> 401 everywhere p50/p95/max"),
    ("backend_add", "2b admin backend add -> routable p50/p95/max"),
    ("publication", "2c publication edit -> routable"),
    ("yaml_edit", "2d YAML edit (new backend) -> routable"),
    ("yaml_edit_commit", "2d of which: file write -> committed"),
    ("loop_steady", "3 1-conn loop, no changes p50/p99/max"),
    ("loop_burst", "3 1-conn loop during change burst"),
    ("loop_inside", "3 of which while applying p50/p95/p99"),
    ("loop_ratio", "3 p99 ratio burst/steady"),
    ("burst_applied", "4 burst of route updates: applied after last"),
    ("burst_lost", "4 lost (web0/web1)"),
    ("rec_nothing", "5 reconcile, nothing changed"),
    ("rec_one", "5 reconcile, one change"),
    ("cpu_req", "6 router CPU per request (8 conns)"),
    ("models_p50", "6 /v1/models p50"),
    ("rss_start", "7 RSS web0 / web1 at start"),
    ("rss_after", "7 RSS web0 / web1 after the changes"),
]


ROUTER_LABELS = {
    "cold_first_ready": "1 first boot (first pull at size): /readyz 200",
    "revoke": "2a coordinator key DELETE -> 401 p50/p95/max",
    "backend_add": "2b route replace (fake REST) -> visible",
    "publication": "2c publication PUT -> routable",
    "burst_applied": "4 burst of route replaces: applied after last",
    "rec_nothing": "5 reconcile pull, nothing changed",
    "rec_one": "5 reconcile pull, one route ratio changed",
}


def run_child(args: argparse.Namespace, db: str, small: bool, out: Path, router: bool = False) -> dict[str, Any] | None:
    cmd = [PY, __file__, "--worker", db, "--child-json", str(out), "--scale", str(args.scale), "--reps", str(args.reps),
           "--step-budget", str(args.step_budget), "--change-timeout", str(args.change_timeout),
           "--yaml-timeout", str(args.yaml_timeout),
           "--start-timeout", str(args.start_timeout), "--loop-seconds", str(args.loop_seconds),
           "--burst-changes", str(args.burst_changes), "--burst-kind", args.burst_kind,
           "--burst-updates", str(args.burst_updates),
           "--burst-seconds", str(args.burst_seconds), "--burst-timeout", str(args.burst_timeout),
           "--settle-timeout", str(args.settle_timeout), "--coord-keys", str(args.coord_keys),
           "--reconcile-interval", str(args.reconcile_interval), "--ack-timeout", str(args.ack_timeout),
           "--log-level", args.log_level]
    if small:
        cmd += ["--small", "--basic"]
    if router:
        cmd.append("--router")
    if args.keep:
        cmd.append("--keep")
    if args.profile:
        cmd += ["--profile", str(Path(args.profile).resolve())]
        if args.profile_gil:
            cmd.append("--profile-gil")
    what = ("ROUTER " if router else "YAML ") + ("small baseline" if small else f"scale {args.scale}")
    print(f"[scale] {db}: {what} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, cwd=ROOT)
    try:
        child.wait(args.child_timeout)
    except subprocess.TimeoutExpired:
        # SIGINT: the child stops its node processes, drops its database and
        # writes what it measured so far.
        print(f"[scale] {db}: {what} exceeded {args.child_timeout:.0f} s; stopping it", file=sys.stderr)
        child.send_signal(signal.SIGINT)
        try:
            child.wait(120)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    print(f"[scale] {db}: {what} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return orjson.loads(out.read_bytes()) if out.exists() else None


def parent(args: argparse.Namespace) -> None:
    dbs = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    modes = ["yaml", "router"] if args.mode == "both" else [args.mode]
    tmp = Path(tempfile.mkdtemp(prefix="router-scale-"))
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for mode in modes:
        router = mode == "router"
        for db in dbs:
            small = run_child(args, db, True, tmp / f"{mode}-{db}-small.json", router)
            big = None if args.small else run_child(args, db, False, tmp / f"{mode}-{db}.json", router)
            results.setdefault(mode, {})[db] = {"small": small, "scale": big}
    shutil.rmtree(tmp, ignore_errors=True)
    sizes = SMALL if args.small else {k: max(1, round(v * args.scale)) for k, v in FULL.items()}
    for mode in modes:
        router = mode == "router"
        print(f"\nbench/scale.py {mode.upper()} mode: {'--small' if args.small else f'--scale {args.scale}'} "
              f"(~{sizes['backends']} backends, {sizes['keys']} keys, {sizes['models']} models), "
              "2 web processes; change rows: from the commit to visible in every web process")
        cells = {db: rows_of(res["small"] if args.small else res["scale"], None if args.small else res["small"])
                 for db, res in results[mode].items()}
        labels = [(key, ROUTER_LABELS.get(key, label) if router else label) for key, label in LABELS]
        width = max(len(label) for _, label in labels) + 2
        print(f"{'':<{width}}" + "".join(f"{db:<44}" for db in dbs))
        for key, label in labels:
            print(f"{label:<{width}}" + "".join(f"{cells[db].get(key, 'n/a (no result)'):<44}" for db in dbs))
        for db in dbs:
            for kind in ("small", "scale"):
                r = results[mode][db][kind]
                if r is None:
                    if not (args.small and kind == "scale"):
                        print(f"{mode} {db} {kind}: no result (child failed or timed out)")
                    continue
                if r.get("fatal"):
                    print(f"{mode} {db} {kind}: stopped: {r['fatal']}")
                if router and kind == "scale":
                    sz = r.get("sizes", {})
                    print(f"{mode} {db} {kind}: keys = {sz.get('operator_keys')} operator (bulk) + "
                          f"{sz.get('coordinator_keys')} coordinator (fake's snapshot)")
                for note in r.get("notes", []):
                    print(f"{mode} {db} {kind}: {note}")
                for step, error in r.get("errors", {}).items():
                    print(f"{mode} {db} {kind}: {step} failed: {error}")
                print(f"{mode} {db} {kind}: {r.get('total_s', 0):.0f} s in all")
    if args.json:
        Path(args.json).write_text(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    ap.add_argument("--mode", choices=["yaml", "router", "both"], default="both",
                    help="YAML mode, ROUTER mode (fake coordinator), or both")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies 20,000 backends / 100,000 keys / 2,000 models")
    ap.add_argument("--small", action="store_true", help="only the 10-backend baseline")
    ap.add_argument("--json", help="write every raw number here")
    ap.add_argument("--reps", type=int, default=20, help="repetitions of each single-change row")
    ap.add_argument("--step-budget", type=float, default=60.0, help="seconds a repeated step may take before capping")
    ap.add_argument("--change-timeout", type=float, default=60.0, help="seconds one change may take to be visible")
    ap.add_argument("--yaml-timeout", type=float, default=120.0, help="seconds one YAML edit may take to be visible")
    ap.add_argument("--start-timeout", type=float, default=180.0)
    ap.add_argument("--loop-seconds", type=float, default=5.0)
    ap.add_argument("--burst-changes", type=int, default=100)
    ap.add_argument("--burst-kind", choices=["backends", "keys"], default="backends",
                    help="row 3's changes: `routerbackend add`s, or `revokeapikey`s of the last keys")
    ap.add_argument("--burst-updates", type=int, default=1000)
    ap.add_argument("--burst-seconds", type=float, default=10.0)
    ap.add_argument("--burst-timeout", type=float, default=90.0)
    ap.add_argument("--settle-timeout", type=float, default=30.0,
                    help="seconds to wait for idle web processes between steps before restarting them")
    ap.add_argument("--child-timeout", type=float, default=900.0)
    ap.add_argument("--coord-keys", type=int, default=2000,
                    help="coordinator keys in the fake's snapshot at full size (the rest of the keys are operator keys)")
    ap.add_argument("--reconcile-interval", type=float, default=10.0, help="ROUTER reconcile_interval (s)")
    ap.add_argument("--ack-timeout", type=float, default=3.0, help="the fake coordinator's ack wait (s)")
    ap.add_argument("--log-level", default="WARNING", help="the node's ROUTER_LOG_LEVEL")
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs (logs)")
    ap.add_argument("--profile", metavar="DIR", help="py-spy node processes through the cold-start, route-update and reconcile-pull rows, row 6's idle window and row 3's burst (collapsed stacks in DIR)")
    ap.add_argument("--profile-gil", action="store_true",
                    help="with --profile: sample only the thread holding the GIL (a thread waiting for it, or in C "
                         "code that released it, is not counted): Python's CPU, not the wall time of every thread")
    ap.add_argument("--worker", choices=["sqlite", "postgres"], help=argparse.SUPPRESS)
    ap.add_argument("--child-json", help=argparse.SUPPRESS)
    ap.add_argument("--basic", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--router", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        sys.path.insert(0, str(ROOT))
        bench = RouterBench(args) if args.router else Bench(args)
        try:
            results = asyncio.run(bench.run())
        except BaseException as exc:  # the parent still gets what was measured
            results = {**bench.results, "fatal": f"{type(exc).__name__}: {exc}"[:500], "notes": bench.notes}
        Path(args.child_json).write_text(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())
        return
    parent(args)


if __name__ == "__main__":
    main()
