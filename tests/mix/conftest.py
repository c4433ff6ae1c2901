"""Shared pieces of the mixed-provider e2e tests (seed 002, MIX-1..6).

Fake backends here are the real fakes (`fakes.*_backend`) with a
`Meter` middleware added: it counts the POSTs in flight inside the backend
(from arrival to the handler's answer) and can hold them at the door until
the test lets them through, so queueing is driven by conditions, not sleeps.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
import redis
from aiohttp import web

from fakes import ollama_backend, openai_backend
from fakes.server import Recorded, ServerThread
from tests.support.routerproc import RouterProc, wait_until

REDIS_URL = "redis://127.0.0.1:6379/0"
INFO = {"ROUTER_LOG_LEVEL": "INFO"}


class Meter:
    """In-flight accounting (and an optional door) for one fake backend.

    `in_flight` counts POSTs between arrival and the handler's answer; for a
    non-streamed reply that is before the body leaves, so it never outlives
    the router's slot. `hold()` closes the door; `admit(n)` lets n through.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.arrived = 0
        self.answered = 0
        self.paths: list[str] = []  # every POST path, routed by the fake or not
        self._permits: int | None = None  # None: the door is open

    def hold(self) -> None:
        with self._lock:
            self._permits = 0

    def admit(self, n: int = 1) -> None:
        with self._lock:
            if self._permits is not None:
                self._permits += n

    def open(self) -> None:
        with self._lock:
            self._permits = None

    def _pass(self) -> bool:
        with self._lock:
            if self._permits is None:
                return True
            if self._permits > 0:
                self._permits -= 1
                return True
            return False

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method != "POST":
            return await handler(request)
        with self._lock:
            self.arrived += 1
            self.paths.append(request.path)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            while not self._pass():  # the door: a condition, polled in the fake's own loop
                await asyncio.sleep(0.005)
            return await handler(request)
        finally:
            with self._lock:
                self.in_flight -= 1
                self.answered += 1


def metered(make_app: Callable[..., web.Application], name: str, models: list[str]) -> ServerThread:
    """A fake backend (not started) whose app carries a `Meter` as `.meter`."""
    meter = Meter()

    def factory(behavior, requests):
        app = make_app(name, models, behavior, requests)
        app.middlewares.append(meter.middleware)  # inner to the fake's own recorder
        return app

    server = ServerThread(factory)
    server.meter = meter  # type: ignore[attr-defined]
    return server


@pytest.fixture
def fakes() -> Iterator[Callable[..., ServerThread]]:
    """Factory: fake(kind_family, name, models) → a started, metered fake backend."""
    started: list[ServerThread] = []

    def make(family: str, name: str, models: tuple[str, ...] = ()) -> ServerThread:
        if family == "ollama":
            server = metered(ollama_backend.make_app, name, list(models or ("llama3.2",)))
        else:
            server = metered(openai_backend.make_app, name, list(models or ("m",)))
        server.start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.meter.open()  # type: ignore[attr-defined]
        server.stop()


def posts(server: ServerThread) -> list[Recorded]:
    return [r for r in server.requests if r.method == "POST"]


def marker() -> str:
    """A unique text to find one request in a fake backend's record."""
    return f"mark-{uuid.uuid4().hex[:12]}"


def received(server: ServerThread, mark: str) -> list[Recorded]:
    return [r for r in posts(server) if mark.encode() in r.body]


def rid() -> str:
    return uuid.uuid4().hex


# -- observations ------------------------------------------------------------


def recent(router: RouterProc) -> list[dict]:
    """The router's Redis list of recent observations (newest first)."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        return [orjson.loads(x) for x in client.lrange(router.prefix + "recent", 0, -1)]
    finally:
        client.close()


def observation(router: RouterProc, request_id: str, timeout: float = 20.0) -> dict:
    """The observation of one request (x-request-id), once the drainer wrote it."""

    def find():
        for obs in recent(router):
            if obs.get("request_id") == request_id:
                return obs
        return None

    return wait_until(find, timeout, what=f"observation of request {request_id}")


def logged(router: RouterProc) -> list[dict]:
    """Observations from the router's structured log ("router.requests")."""
    out = []
    for line in router.logs().splitlines():
        if '"router.requests"' not in line:
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if record.get("logger") == "router.requests" and isinstance(record.get("obs"), dict):
            out.append(record["obs"])
    return out


def logged_observation(router: RouterProc, request_id: str, timeout: float = 20.0) -> dict:
    def find():
        for obs in logged(router):
            if obs.get("request_id") == request_id:
                return obs
        return None

    return wait_until(find, timeout, what=f"log line of request {request_id}")


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels` (0 when none)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


def backend_status(router: RouterProc) -> dict[str, dict]:
    return {b["name"]: b for b in router.status()["backends"]}


def in_threads(n: int, fn: Callable[[int], Any]) -> tuple[list[threading.Thread], dict[int, Any]]:
    """Start `fn(i)` in n threads; results (or the exception) land in the dict."""
    results: dict[int, Any] = {}

    def run(i: int) -> None:
        try:
            results[i] = fn(i)
        except BaseException as exc:  # reported by the test
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    return threads, results


# -- the shared mixed stack ----------------------------------------------------------

# Every passthrough kind of the seed's classifier (MIX-3); "" = kind omitted.
PASSTHROUGH_KINDS = (
    "openai_compat",
    "openai_api",
    "vllm",
    "vllm-mlx",
    "lemonade",
    "sglang",
    "seulgivibe_claude",
    "seulgivibe_openai",
    "",
)
UPSTREAM_KEY = "sk-upstream-vllm-0123456789"

STACK_CONFIG = """
backends:
  - name: vllm-a
    url: {vllm}
    kind: vllm
    models: [mix, pass]
    served_model: org/mix-8b
    api_key: {key}
    headers: {{x-tenant: team-a}}
  - name: ollama-o
    url: {ollama}
    kind: ollama
    models: [mix, olla]
    served_model: llama3.2
  - name: vllm-raw
    url: {vllm}
    kind: vllm
    models: [raw]
  - name: dead
    url: {dead}
    kind: vllm
    models: [flaky, gone]
  - name: ollama-backup
    url: {ollama}
    kind: ollama
    models: [flaky]
    served_model: llama3.2
    priority: 1
{kinds}
fallback:
  fallback_chains: {{gone: [olla]}}
health:
  enabled: false
  failure_threshold: 1000
retry:
  max_attempts: 3
  backoff: 0
"""


def kind_backend(kind: str, url: str) -> str:
    name = f"k-{kind or 'default'}"
    kind_line = f"    kind: {kind}\n" if kind else ""
    return f"  - name: {name}\n    url: {url}\n{kind_line}    models: [{name}]\n"


class Stack:
    """One router in front of a vLLM-kind fake and an Ollama fake."""

    def __init__(self, router: RouterProc, vllm: ServerThread, ollama: ServerThread) -> None:
        self.router = router
        self.vllm = vllm
        self.ollama = ollama

    @property
    def servers(self) -> tuple[ServerThread, ...]:
        return (self.vllm, self.ollama)

    def client(self, **kwargs: Any):
        import openai

        return openai.OpenAI(base_url=self.router.url + "/v1", api_key="sk-client", max_retries=0, timeout=30, **kwargs)

    def arrived(self) -> int:
        """POSTs that reached any fake backend (the door counter sees every path)."""
        return sum(s.meter.arrived for s in self.servers)  # type: ignore[attr-defined]


@pytest.fixture(scope="package")
def stack() -> Iterator[Stack]:
    import socket

    # A port that refuses connections for the whole package: bound, never listening,
    # so no fake started later can take it over.
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    servers = [
        metered(openai_backend.make_app, "vllm-a", ["m"]),
        metered(ollama_backend.make_app, "ollama-o", ["llama3.2"]),
    ]
    router = None
    try:
        vllm, ollama = (server.start() for server in servers)
        kinds = "".join(kind_backend(k, vllm.url) for k in PASSTHROUGH_KINDS)
        kinds += kind_backend("ollama", ollama.url) + "    served_model: llama3.2\n"
        config = STACK_CONFIG.format(
            vllm=vllm.url,
            ollama=ollama.url,
            dead=f"http://127.0.0.1:{dead.getsockname()[1]}",
            key=UPSTREAM_KEY,
            kinds=kinds,
        )
        router = RouterProc(config, env=INFO).start()
        yield Stack(router, vllm, ollama)
    finally:
        if router is not None:
            router.stop()
        for server in servers:
            server.stop()
        dead.close()
