"""A whole AppProxy worker node for e2e tests: web + tasks + events, real.

- web: the real router (``RouterProc``) with an ``appproxy`` YAML section;
- tasks: ``celery -A config worker -B --pool threads`` (beat schedule file in
  the node's var dir, its own queue through ROUTER_REDIS_PREFIX);
- events: ``manage.py runworker appproxy``;
- the coordinator is the in-process ``FakeCoordinator`` on a unique channel,
  and the replicas are fake OpenAI backends (real HTTP on loopback).

Every wait polls a condition with a generous deadline; nothing sleeps a
fixed time.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt

from fakes.coordinator import FakeCoordinator
from tests.support.answers import answered_by
from tests.support.routerproc import PY, ROOT, RouterProc, free_port, wait_until

REDIS_URL = "redis://127.0.0.1:6379/4"
API_SECRET = "apx-api-" + "S3cr3t" * 6
JWT_SECRET = "apx-jwt-" + "J0t0k3n" * 6
DOMAIN = ".models.test"
AGGREGATION_HOST = "llm.test"
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def coordinator(**kw: Any) -> FakeCoordinator:
    kw.setdefault("api_secret", API_SECRET)
    kw.setdefault("jwt_secret", JWT_SECRET)
    kw.setdefault("ack_timeout", 10.0)
    kw.setdefault("channel", f"test-appproxy-{uuid.uuid4().hex}")
    return FakeCoordinator(redis_url=REDIS_URL, **kw)


def node_yaml(
    *,
    coordinator_url: str,
    channel: str,
    authority: str,
    port: int,
    heartbeat: str = "1s",
    reconcile: str = "1s",
    events: bool = True,
    event_format: str = "auto",
    backoff_max: str = "1s",
    backends: str = "",
    fallback: str = "",
) -> str:
    return f"""
backends:
{backends or "  []"}
health: {{enabled: true, interval: 30}}
retry: {{max_attempts: 2, backoff: 0}}
fallback:
  fallback_chains: {{{fallback}}}
appproxy:
  enabled: true
  coordinator_url: "{coordinator_url}"
  api_secret: "${{APPPROXY_API_SECRET}}"
  jwt_secret: "${{APPPROXY_JWT_SECRET}}"
  redis_url: "{REDIS_URL}"
  channel: "{channel}"
  authority: "{authority}"
  hostname: "127.0.0.1"
  frontend_mode: wildcard
  wildcard_domain: "{DOMAIN}"
  aggregation_hosts: ["{AGGREGATION_HOST}"]
  wildcard_traffic_port: {port}
  tls_advertised: false
  heartbeat_period: "{heartbeat}"
  reconcile_interval: "{reconcile}"
  events_enabled: {"true" if events else "false"}
  event_format: {event_format}
  retry_backoff_max: "{backoff_max}"
  subscribe_grace: "20s"
  discovery_timeout: "1s"
"""


class Child:
    """One child process with a log file; SIGTERM then SIGKILL on stop."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.cmd, self.env, self.log_path = name, cmd, env, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> Child:
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=ROOT,
            env=self.env,
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int | None:
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                return proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                return proc.wait(10)
        return proc.returncode

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class Node:
    """web + tasks + events of one router node, registered with ``fc``."""

    def __init__(self, fc: FakeCoordinator, **yaml: Any) -> None:
        self.fc = fc
        self.port = free_port()
        self.authority = f"router-{uuid.uuid4().hex[:8]}"
        if not fc.port:
            fc.port = free_port()  # a coordinator that starts later keeps this port
        self.config = node_yaml(
            coordinator_url=fc.url, channel=fc.channel, authority=self.authority, port=self.port, **yaml
        )
        self.web = RouterProc(
            self.config,
            port=self.port,
            env={
                "APPPROXY_API_SECRET": API_SECRET,
                "APPPROXY_JWT_SECRET": JWT_SECRET,
                "ROUTER_PORT": str(self.port),
                "ROUTER_LOG_LEVEL": "INFO",
            },
        )
        env = self.web.env
        d = self.web.dir
        self.tasks = Child(
            "tasks",
            [
                PY, "-m", "celery", "-A", "config", "worker", "-B", "--pool", "threads", "--concurrency", "4",
                "--loglevel", "INFO", "--without-mingle", "--without-gossip", "--without-heartbeat",
                "-n", f"{self.authority}@%h", "--schedule", str(d / "celerybeat-schedule"),
            ],
            env,
            d / "tasks.log",
        )  # fmt: skip
        self.events = Child("events", [PY, "manage.py", "runworker", "appproxy"], env, d / "events.log")

    # -- lifecycle -------------------------------------------------------------
    def start(self, *, wait_ready: bool = True, timeout: float = 90.0) -> Node:
        self.events.start()
        self.tasks.start()
        if wait_ready:
            self.web.start(timeout)
        else:
            self.start_web_unready(timeout)
        return self

    def start_web_unready(self, timeout: float = 90.0) -> None:
        """Start the web process and wait for /livez only (not /readyz)."""
        cmd = [
            PY, "-m", "uvicorn", "config.asgi:application", "--port", str(self.port),
            "--no-access-log", "--log-level", "warning",
        ]  # fmt: skip
        self.web.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=self.web.env,
            stdout=self.web.log_path.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(lambda: httpx.get(self.web.url + "/livez", timeout=2).status_code == 200, timeout, what="livez")

    def stop(self) -> None:
        for child in (self.tasks, self.events):
            child.stop()
        self.web.stop()

    def logs(self) -> str:
        return "\n".join([self.web.logs(), self.tasks.logs(), self.events.logs()])

    # -- observation -----------------------------------------------------------
    def readyz(self) -> httpx.Response:
        return httpx.get(self.web.url + "/readyz", timeout=5)

    def status(self) -> dict[str, Any]:
        return self.web.status(timeout=10)

    def worker_row(self) -> dict[str, Any] | None:
        return self.fc.worker(self.authority)

    def db(self, sql: str, *params: Any) -> list[tuple]:
        with sqlite3.connect(f"file:{self.web.db}?mode=ro", uri=True, timeout=20) as conn:
            return conn.execute(sql, params).fetchall()

    def mirror(self) -> dict[str, set[tuple[str, int]]]:
        """circuit_id → {(kernel_host, kernel_port)} as mirrored in the DB."""
        out: dict[str, set[tuple[str, int]]] = {}
        for cid, host, port in self.db(
            "SELECT c.circuit_id, r.kernel_host, r.kernel_port FROM appproxy_circuit c "
            "LEFT JOIN appproxy_route r ON r.circuit_id = c.id"
        ):
            out.setdefault(cid, set())
            if port is not None:
                out[cid].add((host, port))
        return out

    def wait_registered(self, timeout: float = 60.0) -> dict[str, Any]:
        def ok():
            row = self.worker_row()
            return row if row and row["status"] == "ALIVE" else None

        return wait_until(ok, timeout, what=f"{self.authority} registered")

    # -- traffic ---------------------------------------------------------------
    def host(self, subdomain: str) -> str:
        return f"{subdomain}{DOMAIN}:{self.port}"

    def chat(
        self, host: str, *, model: str = "whatever", token: str | None = None, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        h = {"Host": host, **(headers or {})}
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        return httpx.post(self.web.url + "/v1/chat/completions", json={"model": model, **CHAT}, headers=h, timeout=30)


def kernel(server: Any) -> tuple[str, int]:
    parts = urlsplit(server.url)
    return parts.hostname or "127.0.0.1", int(parts.port or 80)


class Manager:
    """The Backend.AI manager's side of the coordinator API (reference §6)."""

    def __init__(self, fc: FakeCoordinator) -> None:
        self.fc = fc
        self.http = httpx.Client(base_url=fc.url, headers=fc.headers, timeout=60)

    def create(self, name: str, *, public: bool = True, variant: str | None = "vllm") -> tuple[str, httpx.Response]:
        endpoint_id = str(uuid.uuid4())
        item = {
            "deployment_id": endpoint_id,
            "service_name": name,
            "tags": {
                "session": {"user_uuid": str(uuid.uuid4()), "project_id": str(uuid.uuid4()), "domain_name": "default"},
                "endpoint": {"id": endpoint_id, "runtime_variant": variant},
            },
            "open_to_public": public,
        }
        return endpoint_id, self.http.post("/v2/endpoints/bulk", json={"endpoints": [item]})

    def routes(self, endpoint_id: str, *servers: Any) -> httpx.Response:
        routes = []
        for server in servers:
            host, port = kernel(server)
            routes.append(
                {
                    "session_id": str(uuid.uuid4()),
                    "route_id": str(uuid.uuid4()),
                    "kernel_host": host,
                    "kernel_port": port,
                }
            )
        response = self.http.post(
            "/v2/endpoints/bulk/routes", json={"endpoints": [{"deployment_id": endpoint_id, "routes": routes}]}
        )
        assert response.status_code == 200, response.text
        return response

    def delete(self, endpoint_id: str) -> httpx.Response:
        return self.http.delete(f"/v2/endpoints/{endpoint_id}")

    def token(self, endpoint_id: str, *, exp: datetime | None = None) -> str:
        exp = exp or datetime.now(UTC) + timedelta(hours=1)
        response = self.http.post(
            f"/v2/endpoints/{endpoint_id}/token", json={"user_uuid": str(uuid.uuid4()), "exp": exp.isoformat()}
        )
        assert response.status_code == 200, response.text
        return response.json()["token"]

    def circuit(self, endpoint_id: str) -> dict[str, Any]:
        circuit = self.fc.circuit_for_endpoint(endpoint_id)
        assert circuit is not None
        return circuit


def forge(claims: dict[str, Any], key: str = JWT_SECRET, alg: str = "HS256") -> str:
    return jwt.encode(claims, key, algorithm=alg)


def unsigned(claims: dict[str, Any]) -> str:
    """An ``alg: none`` token (no signature)."""
    return jwt.encode(claims, None, algorithm="none")


def routed_to(response: httpx.Response) -> str | None:
    return answered_by(response)


def eventually(predicate, timeout: float = 30.0, what: str = "condition"):
    return wait_until(predicate, timeout, interval=0.02, what=what)
