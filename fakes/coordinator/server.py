"""The aiohttp application, and ``FakeCoordinator``: it, served in a thread.

Invariants:
- ``make_app`` refuses an unknown event format and empty secrets.
- Routes are added worker API, manager API, ROUTER API, then test knobs; within the
  manager API the plain ``bulk`` paths come before the ``{endpoint_id}``
  patterns that would also match them.
- ``FakeCoordinator`` owns one ``CoordinatorState``: ``stop()`` then
  ``start()`` is a coordinator restart on the same port that keeps all state.
  Its inspection helpers return copies taken under the state lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import threading
import time
from collections.abc import Callable
from typing import Any, Self
from uuid import UUID

from aiohttp import web

from appproxy.envelope import CHANNEL, Format

from . import manager_api, router_api, testing, worker_api
from .auth import errors_and_auth
from .events import bus_ctx, publish_route_update
from .router_state import RouterAck, RouterEvent
from .state import (
    CONFIG_KEY,
    RUNTIME_KEY,
    STATE_KEY,
    CoordinatorState,
    Deregistration,
    FakeConfig,
    PublishedEvent,
    ReceivedAck,
    check_lost_workers,
    snapshot,
)


def make_app(
    api_secret: str,
    jwt_secret: str,
    redis_url: str,
    *,
    event_format: Format = "payload",
    ack_timeout: float = 15.0,
    heartbeat_timeout: float = 30.0,
    lost_check_interval: float = 15.0,
    emit_events: bool = True,
    channel: str = CHANNEL,
    state: CoordinatorState | None = None,
) -> web.Application:
    if event_format not in ("args", "payload"):
        raise ValueError(f"event_format must be 'args' or 'payload', not {event_format!r}")
    if not api_secret or not jwt_secret:
        raise ValueError("api_secret and jwt_secret must be non-empty")
    app = web.Application(middlewares=[errors_and_auth])
    app[CONFIG_KEY] = FakeConfig(
        api_secret=api_secret,
        jwt_secret=jwt_secret,
        redis_url=redis_url,
        event_format=event_format,
        ack_timeout=ack_timeout,
        heartbeat_timeout=heartbeat_timeout,
        lost_check_interval=lost_check_interval,
        emit_events=emit_events,
        channel=channel,
    )
    app[STATE_KEY] = state if state is not None else CoordinatorState()
    app[RUNTIME_KEY] = {"pending": {}, "redis": None, "router_waiters": []}
    app.cleanup_ctx.append(bus_ctx)
    worker_api.add_routes(app.router)
    manager_api.add_routes(app.router)
    router_api.add_routes(app.router)
    testing.add_routes(app.router)
    return app


class FakeCoordinator:
    """Runs ``make_app`` on 127.0.0.1 in a background thread.

    ``start()`` binds ``port`` (0 = any free port) and returns once serving;
    ``stop()`` shuts it down; a later ``start()`` rebinds the same port and
    keeps all state (a coordinator restart). Usable as a context manager.
    """

    def __init__(
        self,
        *,
        api_secret: str = "fake-api-secret",
        jwt_secret: str = "fake-jwt-secret",
        redis_url: str = "redis://127.0.0.1:6379/4",
        event_format: Format = "payload",
        ack_timeout: float = 15.0,
        heartbeat_timeout: float = 30.0,
        lost_check_interval: float = 15.0,
        emit_events: bool = True,
        channel: str = CHANNEL,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.api_secret = api_secret
        self.jwt_secret = jwt_secret
        self.redis_url = redis_url
        self.channel = channel
        self.event_format: Format = event_format
        self.host = host
        self.port = port
        self.state = CoordinatorState()
        self.ack_timeout = ack_timeout
        self.heartbeat_timeout = heartbeat_timeout
        self.lost_check_interval = lost_check_interval
        self.emit_events = emit_events
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._app: web.Application | None = None

    # lifecycle
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"X-BackendAI-Token": self.api_secret}

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout: float = 30.0) -> Self:
        if self.running:
            return self
        ready = threading.Event()
        failure: list[Exception] = []

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            app = make_app(
                self.api_secret,
                self.jwt_secret,
                self.redis_url,
                event_format=self.event_format,
                ack_timeout=self.ack_timeout,
                heartbeat_timeout=self.heartbeat_timeout,
                lost_check_interval=self.lost_check_interval,
                emit_events=self.emit_events,
                channel=self.channel,
                state=self.state,
            )
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
            try:
                await runner.setup()
                site = web.TCPSite(
                    runner,
                    self.host,
                    self.port,
                    reuse_address=True,
                    shutdown_timeout=1.0,
                )
                await site.start()
                self.port = runner.addresses[0][1]
                self._app = app
            except Exception as exc:  # re-raised by start()
                failure.append(exc)
                ready.set()
                await runner.cleanup()
                return
            ready.set()
            try:
                await self._stop.wait()
            finally:
                await runner.cleanup()

        self._thread = threading.Thread(target=lambda: asyncio.run(main()), name="fake-coordinator", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError("fake coordinator did not start in time")
        if failure:
            self._thread.join(timeout)
            self._thread = None
            raise RuntimeError(f"fake coordinator failed to start: {failure[0]!r}") from failure[0]
        return self

    def stop(self, timeout: float = 30.0) -> None:
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None:
            return
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout)
        self._thread = None
        self._app = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # inspection
    def snapshot(self) -> dict[str, Any]:
        return snapshot(self.state)

    def workers(self) -> list[dict[str, Any]]:
        with self.state.lock:
            return copy.deepcopy(list(self.state.workers.values()))

    def worker(self, authority: str) -> dict[str, Any] | None:
        with self.state.lock:
            return copy.deepcopy(self.state.worker_by_authority(authority))

    def circuits(self) -> list[dict[str, Any]]:
        with self.state.lock:
            return copy.deepcopy(list(self.state.circuits.values()))

    def circuit_for_endpoint(self, endpoint_id: str | UUID) -> dict[str, Any] | None:
        with self.state.lock:
            return copy.deepcopy(self.state.endpoint_circuit(str(endpoint_id)))

    def events(self, name: str | None = None) -> list[PublishedEvent]:
        with self.state.lock:
            return [copy.copy(e) for e in self.state.events if name is None or e.name == name]

    def acks(self) -> list[ReceivedAck]:
        with self.state.lock:
            return [copy.copy(a) for a in self.state.acks]

    def deregistrations(self) -> list[Deregistration]:
        """Every accepted DELETE /api/worker/{id}, with its monotonic time."""
        with self.state.lock:
            return [copy.copy(d) for d in self.state.deregistrations]

    def dropped(self) -> list[str]:
        with self.state.lock:
            return [reason for reason, _ in self.state.dropped]

    def router_view(self) -> dict[str, Any]:
        """ROUTER state as ``/_test/router`` shows it (no token hashes)."""
        with self.state.lock:
            return copy.deepcopy(self.state.router.view())

    def router_events(self, name: str | None = None) -> list[RouterEvent]:
        with self.state.lock:
            return [copy.copy(e) for e in self.state.router.events if name is None or e.name == name]

    def router_acks(self) -> list[RouterAck]:
        with self.state.lock:
            return [copy.copy(a) for a in self.state.router.acks]

    # knobs
    def set_router_alt_spelling(self, alt: bool = True) -> None:
        with self.state.lock:
            self.state.router.alt_spelling = alt

    def suppress_next_event(self, count: int = 1) -> None:
        with self.state.lock:
            self.state.suppress += count

    def set_traffic_ratio(
        self,
        endpoint_or_circuit_id: str | UUID,
        route_id: str | UUID,
        ratio: float,
        *,
        emit: bool = False,
        timeout: float = 10.0,
    ) -> dict[str, Any]:
        circuit = testing.set_traffic_ratio(self.state, str(endpoint_or_circuit_id), str(route_id), ratio)
        if emit:
            app, loop = self._app, self._loop
            if app is None or loop is None:
                raise RuntimeError("the fake coordinator is not running")
            fut = asyncio.run_coroutine_threadsafe(publish_route_update(app, circuit), loop)
            fut.result(timeout)
        return circuit

    def check_lost_workers(self) -> list[str]:
        """Run the LOST check now (instead of waiting for the timer)."""
        return check_lost_workers(self.state, self.heartbeat_timeout)

    def wait_for(
        self,
        predicate: Callable[[], Any],
        timeout: float = 10.0,
        interval: float = 0.02,
    ) -> Any:
        """Poll ``predicate`` until truthy; return its value or raise TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(f"condition not met within {timeout:.1f}s")
            time.sleep(interval)
