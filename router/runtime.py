"""The per-process runtime of a web process.

Holds the one piece of global mutable state — the current routing Snapshot —
plus the process-local runtime facts (backend states, selector, the shared
httpx client). Background tasks keep the snapshot current:

- a Redis Pub/Sub listener on the change-notice channel (≤ 1 s reloads) and
  the health channel (active probe results from the tasks process);
- a safety poll: the DB revision every ROUTER_POLL_SECONDS, and every
  second the message of a YAML edit the writer refused (reported in /status
  and the log).

A web process applies the YAML file once, at start (digest-checked, so N
processes write once); after that the tasks process is the one writer
(node/config_watch.py) and an edit reaches this process as a revision.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

import httpx
import orjson
from django.conf import settings

from . import cluster, extensions, gcwork, observe, tracing
from .aio import check_cancelled
from .core.health import BackendState, StateTable
from .core.kvindex import PrefixIndex
from .core.selection import CACHE_AWARE, Candidate, Selector
from .core.snapshot import EMPTY, Snapshot
from .dbthread import DbThread
from .providers.http import LeanAiohttpTransport
from .quotas import QuotaStore, store_for
from .redis import async_client
from .revision import config_error_key, current_revision
from .selectors import REFRESHES, refresh_snapshot
from .services import config_sync, resolve_config_path

log = logging.getLogger(__name__)



def health_key() -> str:
    """Both the hash of verdicts and the channel announcing them."""
    return settings.ROUTER_REDIS_PREFIX + "health"


def load_key() -> str:
    """The channel of the backends' own load reports (node.tasks)."""
    return settings.ROUTER_REDIS_PREFIX + "load"


# More channels the web process's one pub/sub connection listens to: channel
# name (a function of the deployment's prefix) → what a message does. Each
# registers at import, before the runtime subscribes (router.respcache).
_CHANNELS: dict[Callable[[], str], Callable[[bytes | None], None]] = {}


def on_channel(name: Callable[[], str], handler: Callable[[bytes | None], None]) -> None:
    """Have `handler` run (on the event loop, so quickly) for every message
    published on the channel `name()`, over the runtime's own subscription:
    no connection of its own, resubscribed with the rest after an outage."""
    _CHANNELS[name] = handler


# The snapshot's reads (reloads, revision polls, the start's config sync) on
# one thread of their own, its DB connection kept between them: on
# PostgreSQL a new connection per reload was ~10-20 ms of every change's
# time to routable (router.dbthread).
_db_thread = DbThread("router-snapshot")


def _in_thread(fn, *args):
    """Run ORM work on the snapshot thread."""
    return _db_thread.run(fn, *args)


def _freeze_heap() -> None:
    """After a snapshot compiled from scratch: collect once, then move every
    object alive (the new snapshot, Django, the modules) out of the cyclic
    GC's reach. At 20,000 backends and 100,000 keys a full collection walks
    ~230,000 objects (~170 ms, all of it a pause on the event loop); frozen,
    the collector only walks what requests allocate. Frozen objects are still
    freed by reference counting when a later snapshot drops them (snapshots
    hold no cycles); collecting first means no garbage is frozen."""
    gcwork.settle()


def make_client() -> httpx.AsyncClient:
    """The process's one upstream client. The aiohttp transport measured
    ~2 ms/request cheaper than httpx's default pool (docs/performance.md)."""
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=200, keepalive_expiry=30)
    return httpx.AsyncClient(
        transport=LeanAiohttpTransport(limits=limits, trust_env=False),
        timeout=httpx.Timeout(600.0, connect=5.0),
        follow_redirects=False,
    )


def transport_of(client: httpx.AsyncClient) -> httpx.AsyncBaseTransport:
    """The client's transport. The hot path sends through it directly: the
    client's redirect, auth and cookie-jar layers cost ~0.2 ms per request
    and a proxy needs none of them."""
    return client._transport


class Runtime:
    def __init__(self) -> None:
        self.snapshot: Snapshot = EMPTY
        self.states = StateTable()
        self.selector = Selector("weighted_round_robin")
        # cache_aware: what this process sent where (None under other strategies).
        self.prefix_index: PrefixIndex | None = None
        self.client: httpx.AsyncClient | None = None
        self.transport: httpx.AsyncBaseTransport | None = None
        # The key gate of the current snapshot (router.extensions); None = open.
        self.gate: extensions.KeyGate | None = None
        # The buckets of rate_limits and of backends' quotas (router/quotas.py).
        self.quotas = QuotaStore(EMPTY.quota_scope)
        self.capacity_changed: asyncio.Condition | None = None
        self.waiting = 0
        self._ready = asyncio.Event()
        self._loaded = False  # the initial load (the configured file applied) is done
        self._tasks: list[asyncio.Task] = []
        self._started = False
        self._reload_lock = asyncio.Lock()
        self._reloaded_at = -math.inf  # monotonic start of the last refresh
        self._config_error: str | None = None  # the refusal last reported
        self.loop: asyncio.AbstractEventLoop | None = None
        self.started_at = time.time()
        self.last_error: str | None = None
        # Redis outage as this process sees it (None = reachable); the
        # listener loop sets and clears it, logging once per transition.
        self.redis_error: str | None = None
        self.redis_down_since: float | None = None
        self._candidates: dict[tuple[str, str | None, str | None], tuple[Candidate, ...]] = {}

    # -- lifecycle -------------------------------------------------------
    async def start(self, *, publish: bool = True) -> None:
        """`publish`: this is a web process, shown in the cluster view
        (router.cluster); the tasks process runs batch lines on a runtime of
        its own (filestore.batchrun) and publishes its own, smaller record."""
        if self._started:
            return
        self._started = True
        self.loop = asyncio.get_running_loop()
        self.client = make_client()
        self.transport = transport_of(self.client)
        self.capacity_changed = asyncio.Condition()
        if tracing.ENABLED:  # the exporter's own thread; off, nothing of OpenTelemetry is imported
            tracing.start()
        self._tasks = [
            asyncio.create_task(self._initial_load(), name="router-initial-load"),
            asyncio.create_task(self._listen(), name="router-notice-listener"),
            asyncio.create_task(self._poll(), name="router-safety-poll"),
            asyncio.create_task(observe.run_drainer(states=self.states), name="router-observations"),
        ]
        if publish:
            self._tasks.append(asyncio.create_task(cluster.run_publisher(self), name="router-cluster-state"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self.client is not None:
            await self.client.aclose()
        self._started = False

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    async def wait_ready(self, timeout: float = 30.0) -> bool:
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError:
            return False
        return True

    # -- loading ---------------------------------------------------------
    async def _initial_load(self) -> None:
        delay = 0.2
        while True:
            try:
                await self._sync_config_file()
                # Ready only from here: a snapshot the notice listener or the
                # safety poll installed meanwhile may predate the configured
                # file (e.g. the tasks process still writing a large YAML), and
                # /readyz must not send traffic to a node that answers 404.
                self._loaded = True
                await self.reload()
                self._ready.set()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.last_error = str(exc)
                log.error("initial routing load failed: %s", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _sync_config_file(self) -> None:
        await _in_thread(config_sync, resolve_config_path())

    async def reload(self) -> None:
        """Bring the snapshot to the current revision: updated in place from
        the change log (a few rows read), or compiled from scratch when the log
        cannot say (router/selectors.py refresh_snapshot)."""
        async with self._reload_lock:
            # At most one refresh per ROUTER_RELOAD_GAP_MS: a burst of commits
            # is read in one refresh instead of one each (each one a few ms
            # of this process's interpreter, taken from the requests in flight).
            wait = self._reloaded_at + settings.ROUTER_RELOAD_GAP_MS / 1000 - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._reloaded_at = time.monotonic()
            compiled = REFRESHES["compiled"]
            snap = await _in_thread(refresh_snapshot, self.snapshot)
            if snap is not self.snapshot:
                self.install(snap, ready=self._loaded)
            if REFRESHES["compiled"] != compiled:
                _freeze_heap()

    def install(self, snap: Snapshot, *, ready: bool = True) -> None:
        """Swap in a compiled snapshot (and what is derived from it); `ready`:
        it holds the configured state (false before the initial load)."""
        self._install_selector(snap)
        if snap.backends is not self.snapshot.backends:  # (a key change shares them)
            self.states.retain(snap.backends)
            if self.prefix_index is not None:
                self.prefix_index.retain(snap.backends)
        if snap.health is not None and snap.health != self.snapshot.health:
            self.states.set_policy(snap.health)
        if (
            snap.by_model is not self.snapshot.by_model
            or snap.backends is not self.snapshot.backends
            or snap.ingress is not self.snapshot.ingress  # (a circuit gone private confines its replicas)
        ):
            self._candidates = {}
        self.gate = self._make_gate(snap)
        self.quotas = store_for(snap.quota_scope, self.quotas)
        self.snapshot = snap
        self.last_error = None
        if ready:
            self._ready.set()
        log.info("routing snapshot installed", extra={"revision": snap.revision, "backends": len(snap.backends)})

    def _install_selector(self, snap: Snapshot) -> None:
        """A new selector when the strategy or its settings changed; the
        prefix index is kept across changes that leave its size alone."""
        policy = snap.cache_aware
        index = None
        if snap.strategy == CACHE_AWARE:
            index = self.prefix_index
            if index is None or index.max_entries != policy.max_entries - policy.max_entries % 2:
                index = PrefixIndex(policy.max_entries)
        self.prefix_index = index
        sel = self.selector
        if (
            sel.strategy != snap.strategy
            or sel.load_factor != snap.load_factor
            or sel.min_match != policy.min_match
            or sel.index is not index
        ):
            self.selector = Selector(snap.strategy, load_factor=snap.load_factor, index=index,
                                     min_match=policy.min_match)

    # -- hot path helpers ----------------------------------------------------
    def candidates(
        self, snap: Snapshot, model: str, scope: str | None = None, role: str | None = None
    ) -> tuple[Candidate, ...]:
        """Candidates of a model (only backends named `scope…` when scoped, e.g.
        one AppProxy circuit's replicas; unscoped, never one confined to its
        own Host; only those of `role` when given: a disaggregated model's
        phase), cached per installed snapshot."""
        key = (model, scope, role)
        cached = self._candidates.get(key)
        if cached is None or snap is not self.snapshot:
            if scope is not None:
                specs = tuple(s for s in snap.by_model.get(model, ()) if s.name.startswith(scope))
            else:
                specs = snap.open_group(model)
            if role is not None:
                specs = tuple(s for s in specs if s.role == role)
            cached = tuple(Candidate(spec, self.states.get(spec.name)) for spec in specs)
            if snap is self.snapshot:
                self._candidates[key] = cached
        return cached

    def release(self, state: BackendState, *, ok: bool | None, latency_ms: float = 0.0) -> None:
        """End one on_start(): success, failure, or no verdict (None)."""
        now = time.monotonic()
        if ok is None:
            state.on_cancel()
        elif ok:
            state.on_success(latency_ms, now)
        else:
            state.on_failure(now)
        loop = self.loop
        if self.waiting and self.capacity_changed is not None and loop is not None:
            loop.call_soon_threadsafe(lambda: loop.create_task(self._notify_capacity()))

    async def _notify_capacity(self) -> None:
        assert self.capacity_changed is not None
        async with self.capacity_changed:
            self.capacity_changed.notify_all()

    def _make_gate(self, snap: Snapshot) -> extensions.KeyGate | None:
        """The registered factory's gate (it carries the rate limiter over from
        the gate it replaces); no factory (the keys app absent) → open."""
        factory = extensions.gate_factory()
        return None if factory is None else factory(snap, self.gate)

    # -- background ------------------------------------------------------
    async def _listen(self) -> None:
        delay = 0.2
        while True:
            pubsub = None
            try:
                pubsub = async_client().pubsub(ignore_subscribe_messages=True)
                more = {name().encode(): handler for name, handler in _CHANNELS.items()}
                await pubsub.subscribe(settings.ROUTER_NOTICE_CHANNEL, health_key(), load_key(), *more)
                check_cancelled()
                delay = 0.2
                recovered = self.redis_down_since is not None
                self._redis_up()
                await self._refresh_health()
                if recovered:
                    # Notices published while we were not subscribed are gone: catch
                    # up from the DB now instead of waiting for the safety poll.
                    if await _in_thread(current_revision) != self.snapshot.revision:
                        await self.reload()
                async for message in pubsub.listen():
                    check_cancelled()
                    channel = message.get("channel")
                    if channel == health_key().encode():
                        self._apply_health(message.get("data"))
                        continue
                    if channel == load_key().encode():
                        self._apply_load(message.get("data"))
                        continue
                    handler = more.get(channel)
                    if handler is not None:
                        handler(message.get("data"))
                        continue
                    try:
                        revision = int(message["data"])
                    except (TypeError, ValueError):
                        continue
                    # Only newer: the notices queued while a reload ran are
                    # covered by it (a DB reset is the safety poll's business).
                    if revision > self.snapshot.revision:
                        await self.reload()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                check_cancelled()
                self._redis_down(exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            finally:
                if pubsub is not None:
                    try:
                        await pubsub.aclose()
                    except Exception:
                        pass

    def _redis_down(self, exc: BaseException) -> None:
        """Once per outage: a warning, not a line per retry. /v1 keeps
        serving from the snapshot; reloads fall back to the DB poll."""
        error = f"{type(exc).__name__}: {exc}"[:300]
        if self.redis_down_since is None:
            self.redis_down_since = time.time()
            log.warning(
                "Redis unavailable (%s); serving from the current snapshot, "
                "reloads via the %ss DB poll, probe verdicts and recent requests paused",
                error, settings.ROUTER_POLL_SECONDS,
            )
        self.redis_error = error

    def _redis_up(self) -> None:
        if self.redis_down_since is not None:
            log.warning("Redis reachable again after %.0fs", time.time() - self.redis_down_since)
        self.redis_down_since = None
        self.redis_error = None

    async def _refresh_health(self) -> None:
        try:
            data = await async_client().hgetall(health_key())
        except Exception:
            return
        for name, value in data.items():
            key = name.decode() if isinstance(name, bytes) else name
            if key in self.snapshot.backends:
                self._probed(key, value == b"1", warming=value == b"w")

    def _apply_health(self, data: bytes | None) -> None:
        """A probe round's results: {"name": true | false | "warming_up", ...}."""
        try:
            results = orjson.loads(data or b"{}")
        except orjson.JSONDecodeError:
            return
        for name, ok in results.items():
            if name in self.snapshot.backends:
                self._probed(name, ok is True, warming=ok == "warming_up")

    def _apply_load(self, data: bytes | None) -> None:
        """A probe round's load reports: {"ttl": s, "load": {"name": [running +
        waiting, kv usage or null]}, "restarted": ["name"]}. A report counts
        for `ttl` seconds; a restarted backend's prompt cache is gone."""
        try:
            message = orjson.loads(data or b"{}")
            until = time.monotonic() + float(message.get("ttl", 0))
            loads = message.get("load") or {}
            restarted = message.get("restarted") or []
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
            return
        backends = self.snapshot.backends
        for name, report in loads.items():
            if name not in backends or not isinstance(report, list) or len(report) != 2:
                continue
            load, kv = report
            if isinstance(load, int) and load >= 0:
                state = self.states.peek(name)
                if state is None:
                    if not load:  # an idle backend without a state stays without one (see _probed)
                        continue
                    state = self.states.get(name)
                state.reported = load
                state.reported_until = until
                state.kv_usage = float(kv) if isinstance(kv, (int, float)) else None
        index = self.prefix_index
        if index is not None:
            for name in restarted:
                if isinstance(name, str):
                    index.forget(name)

    def _probed(self, name: str, ok: bool, *, warming: bool = False) -> None:
        """A probe's verdict; a healthy one for a backend without a state is
        what a new state says already, so none is made for it (20,000 probed
        backends are not 20,000 states held). A warming backend is out of
        rotation like a down one, and shown as warming up."""
        state = self.states.peek(name)
        if state is not None:
            state.probe_healthy, state.warming = ok, warming
        elif not ok:
            state = self.states.get(name)
            state.probe_healthy, state.warming = False, warming
        if not ok and self.prefix_index is not None:
            self.prefix_index.forget(name)  # down: whatever it held may not survive its return

    async def _poll(self) -> None:
        last_db_check = 0.0
        while True:
            try:
                await asyncio.sleep(1.0)
                await self._check_config_error()
                now = time.monotonic()
                if now - last_db_check >= settings.ROUTER_POLL_SECONDS:
                    last_db_check = now
                    revision = await _in_thread(current_revision)
                    # Only newer: the notices queued while a reload ran are
                    # covered by it (a DB reset is the safety poll's business).
                    if revision > self.snapshot.revision:
                        await self.reload()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("safety poll failed: %s", exc)


    async def _check_config_error(self) -> None:
        """Report a YAML edit the writer refused, once per refusal; the old
        state keeps serving."""
        try:
            raw = await async_client().get(config_error_key())
        except Exception:
            return
        error = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        if error is not None and error != self._config_error:
            self.last_error = error
            log.error("config file not applied: %s", error)
        self._config_error = error


_runtime: Runtime | None = None


def get_runtime() -> Runtime:
    global _runtime
    if _runtime is None:
        _runtime = Runtime()
    return _runtime

