"""A whole ROUTER-mode worker node for e2e tests: web + tasks + events, real,
registered with the fake coordinator's BEP-1053 side, and the Manager's
``/v2/routers`` API to drive it.

Each ``RouterNode.start()`` is a node start: a fresh ``APPPROXY_NODE_ID`` in
the environment of all three processes (what ``manage.py runnode`` does).
Every wait polls a condition with a generous deadline.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import subprocess
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx

from fakes.coordinator import FakeCoordinator
from tests.support.routerproc import PY, ROOT, RouterProc, free_port, wait_until

from .support import API_SECRET, REDIS_URL, Child, Manager, coordinator

__all__ = ["RouterManager", "RouterNode", "new_key", "router_yaml"]


def router_yaml(
    *,
    coordinator_url: str,
    channel: str,
    authority: str,
    port: int,
    heartbeat: str = "1s",
    reconcile: str = "2s",
    events: bool = True,
    backends: str = "",
    fallback: str = "",
    weighting: str = "",
) -> str:
    return f"""
backends:
{backends or "  []"}
health: {{enabled: false}}
retry: {{max_attempts: 2, backoff: 0}}
fallback:
  fallback_chains: {{{fallback}}}
appproxy_router:
  enabled: true
  coordinator_url: "{coordinator_url}"
  api_secret: "${{APPPROXY_API_SECRET}}"
  redis_url: "{REDIS_URL}"
  authority: "{authority}"
  hostname: "127.0.0.1"
  traffic_port: 0
  api_port: {port}
  tls_advertised: false
  heartbeat_period: "{heartbeat}"
  reconcile_interval: "{reconcile}"
  events_enabled: {"true" if events else "false"}
  channel: "{channel}"
  retry_backoff_max: "1s"
  subscribe_grace: "20s"
""" + (f"  weighting: {weighting}\n" if weighting else "")


class RouterNode:
    """web + tasks + events of one ROUTER node (its own SQLite and Redis namespace)."""

    def __init__(self, fc: FakeCoordinator, authority: str, *, env: dict[str, str] | None = None, **yaml: Any) -> None:
        self.fc = fc
        self.authority = authority
        self.port = free_port()
        self.config = router_yaml(
            coordinator_url=fc.url, channel=fc.channel, authority=authority, port=self.port, **yaml
        )
        self.web = RouterProc(
            self.config,
            port=self.port,
            env={
                "APPPROXY_API_SECRET": API_SECRET,
                "ROUTER_PORT": str(self.port),
                "ROUTER_LOG_LEVEL": "INFO",
                **(env or {}),
            },
        )
        self.node_id = ""
        d = self.web.dir
        self.tasks = Child(
            "tasks",
            [
                PY, "-m", "celery", "-A", "config", "worker", "-B", "--pool", "threads", "--concurrency", "4",
                "--loglevel", "INFO", "--without-mingle", "--without-gossip", "--without-heartbeat",
                "-n", f"{uuid.uuid4().hex[:8]}@%h", "--schedule", str(d / "celerybeat-schedule"),
            ],
            self.web.env,
            d / "tasks.log",
        )  # fmt: skip
        self.events = Child("events", [PY, "manage.py", "runworker", "appproxy"], self.web.env, d / "events.log")

    def start(self, timeout: float = 90.0, *, wait_ready: bool = True) -> RouterNode:
        self.node_id = str(uuid.uuid4())  # a node start: a new session id for every process
        self.web.env["APPPROXY_NODE_ID"] = self.node_id
        for child in (self.tasks, self.events):
            child.env = self.web.env
        self.events.start()
        self.tasks.start()
        if wait_ready:
            self.web.start(timeout)
        else:
            self.start_web_unready(timeout)
        return self

    def start_web_unready(self, timeout: float = 90.0) -> None:
        """The web process alone, waited for /livez only (not /readyz)."""
        cmd = [PY, "-m", "uvicorn", "config.asgi:application", "--port", str(self.port), "--log-level", "warning"]
        self.web.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=self.web.env,
            stdout=self.web.log_path.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(lambda: httpx.get(self.url + "/livez", timeout=2).status_code == 200, timeout, what="livez")

    def stop(self) -> None:
        for child in (self.tasks, self.events):
            child.stop()
        self.web.stop()

    def logs(self) -> str:
        return "\n".join([self.web.logs(), self.tasks.logs(), self.events.logs()])

    @property
    def url(self) -> str:
        return self.web.url

    def readyz(self) -> httpx.Response:
        return httpx.get(self.url + "/readyz", timeout=5)

    def status(self) -> dict[str, Any]:
        return self.web.status(timeout=10)

    def chat(self, model: str, key: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.post(
            self.url + "/v1/chat/completions",
            json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
            headers=headers,
            timeout=30,
        )

    def models(self, key: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.get(self.url + "/v1/models", headers=headers, timeout=30)


def new_key() -> tuple[str, str]:
    """(plaintext, sha256 hex) of a fresh key (the Manager's side)."""
    plain = "sk-" + secrets.token_urlsafe(32)
    return plain, hashlib.sha256(plain.encode()).hexdigest()


class RouterManager(Manager):
    """The Backend.AI Manager's ``/v2/routers`` calls, besides its ``/v2/endpoints`` ones."""

    def __init__(self, fc: FakeCoordinator, authority: str) -> None:
        super().__init__(fc)
        self.authority = authority

    def endpoint(self, name: str, *servers: Any, variant: str | None = "vllm") -> str:
        """A deployment (its circuit is placed on the ROUTER worker) with these replicas."""
        endpoint_id, created = self.create(name, variant=variant)
        assert created.status_code == 200, created.text
        if servers:
            self.routes(endpoint_id, *servers)
        return endpoint_id

    # publications and keys
    def publish(self, model: str, mappings: dict[str, float], *, aliases: tuple[str, ...] = ()) -> dict[str, Any]:
        body = {
            "aliases": list(aliases),
            "mappings": [{"endpoint_id": e, "ratio": r} for e, r in mappings.items()],
            "control_mode": "manual",
        }
        response = self.http.put(f"/v2/routers/{self.authority}/models/{model}", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    def unpublish(self, model: str) -> dict[str, Any]:
        response = self.http.delete(f"/v2/routers/{self.authority}/models/{model}")
        assert response.status_code == 200, response.text
        return response.json()

    def put_key(self, key_id: str, token_hash: str, **fields: Any) -> dict[str, Any]:
        response = self.http.put(
            f"/v2/routers/{self.authority}/api-keys/{key_id}", json={"token_hash": token_hash, **fields}
        )
        assert response.status_code == 200, response.text
        return response.json()

    def delete_key(self, key_id: str, *, strict: bool = False) -> dict[str, Any]:
        params = {"strict": "true"} if strict else None
        response = self.http.delete(f"/v2/routers/{self.authority}/api-keys/{key_id}", params=params)
        assert response.status_code == 200, response.text
        return response.json()

    def router_state(self) -> dict[str, Any]:
        response = self.http.get("/_test/router")
        assert response.status_code == 200, response.text
        return response.json()


@contextlib.contextmanager
def registered_router(settings, *, replicas: int, name: str, ack_timeout: float) -> Iterator[SimpleNamespace]:
    """In-process ROUTER-mode pulls against a real fake coordinator: a Redis
    namespace of its own, `replicas` fake backends, an authority registered
    as node "n1" (its WorkerState row written), and a RouterManager. No
    events process runs: nothing acks, so the manager's calls are committed
    and answered 503 after `ack_timeout`."""
    from appproxy.client import CoordinatorClient
    from appproxy.models import WorkerState
    from appproxy.router_mode.wire import router_registration
    from fakes import openai_backend
    from router.core.secret import Secret

    prefix = f"t{uuid.uuid4().hex[:10]}:"
    settings.ROUTER_REDIS_PREFIX = prefix
    settings.ROUTER_NOTICE_CHANNEL = prefix + "notice"
    servers = [openai_backend.server_thread(f"{name}-{i}", ["served"]).start() for i in range(replicas)]
    fc = coordinator(ack_timeout=ack_timeout).start()
    authority = f"router-{uuid.uuid4().hex[:8]}"
    client = CoordinatorClient(fc.url, Secret(API_SECRET))
    try:
        info = client.register_router(
            router_registration(
                authority=authority, hostname="127.0.0.1", api_port=8000, traffic_port=None, node_id="n1"
            )
        )
        WorkerState.objects.create(authority=authority, node_id="n1", worker_id=str(info.id), status="registered")
        yield SimpleNamespace(
            client=client,
            worker_id=str(info.id),
            manager=RouterManager(fc, authority),
            replicas=servers,
            authority=authority,
            settings=SimpleNamespace(authority=authority),
        )
    finally:
        client.close()
        fc.stop()
        for server in servers:
            server.stop()
