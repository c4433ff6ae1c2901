"""Per-key request rate limits: `rate_limit` requests in any 60 s window.

Semantics (both scopes): an exact sliding window. A request is admitted when
fewer than `limit` requests were *admitted* for the key in the 60 s before it
(a request admitted at t stops counting at t + 60, exactly). A refused request
is not counted, so a client that keeps retrying is not locked out for longer.
`retry_after` is the whole number of seconds (≥ 1, rounded up) until the
oldest counted request leaves the window.

- scope "node" (default, seed §9.7/§9.13): each process counts on its own; in
  HA the effective cluster ceiling is about limit × processes. Memory is
  bounded: a bucket holds at most `limit` timestamps (only admitted requests
  inside the window), idle buckets are swept, and at most `max_buckets`
  buckets are kept (least recently used dropped first).
- scope "cluster" (opt-in): every process shares one window per key in Redis
  (a sorted set updated by one atomic Lua script; the key expires with the
  window). Redis time is not used: callers pass `now`, so node clocks must be
  NTP-synced (sub-second skew only blurs the window edge). If Redis fails or
  is slow (100 ms timeouts), the limiter falls back to its own node window,
  logs one warning, and retries Redis after a short cooldown — it never
  raises and never blocks a request for long.

Clocks are injected: `acquire(bucket, limit, now)` takes epoch seconds.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import threading
import uuid
from collections import OrderedDict, deque
from typing import Any, Protocol

import redis.asyncio as aioredis
from django.conf import settings

log = logging.getLogger(__name__)

WINDOW = 60.0


class Limiter(Protocol):
    scope: str

    async def acquire(self, bucket: str, limit: int, now: float) -> tuple[bool, int]:
        """Count one request; (allowed, retry_after_seconds)."""
        ...


def _retry_after(seconds: float) -> int:
    return max(1, math.ceil(seconds))


class NodeLimiter:
    """In-process sliding window. Thread-safe; never awaits."""

    scope = "node"

    def __init__(self, *, window: float = WINDOW, max_buckets: int = 100_000) -> None:
        self.window = window
        self.max_buckets = max_buckets
        self._buckets: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()
        self._next_sweep = 0.0

    def __len__(self) -> int:
        return len(self._buckets)

    def hit(self, bucket: str, limit: int, now: float) -> tuple[bool, int]:
        horizon = now - self.window
        with self._lock:
            if now >= self._next_sweep:
                self._sweep(horizon)
                self._next_sweep = now + self.window
            times = self._buckets.get(bucket)
            if times is None:
                times = self._buckets[bucket] = deque()
                if len(self._buckets) > self.max_buckets:
                    self._buckets.popitem(last=False)
            else:
                self._buckets.move_to_end(bucket)
                while times and times[0] <= horizon:
                    times.popleft()
            over = len(times) - limit
            if over < 0:
                times.append(now)
                return True, 0
            # The limit may have been lowered: the request that must leave
            # the window is the one `limit` places from the newest.
            while len(times) > limit:
                times.popleft()
            return False, _retry_after(times[0] + self.window - now)

    async def acquire(self, bucket: str, limit: int, now: float) -> tuple[bool, int]:
        return self.hit(bucket, limit, now)

    def _sweep(self, horizon: float) -> None:
        stale = [b for b, t in self._buckets.items() if not t or t[-1] <= horizon]
        for b in stale:
            del self._buckets[b]


# KEYS[1] = bucket; ARGV = now, window, limit, member. Returns {allowed, ms}.
_LUA = """
local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local n = redis.call('ZCARD', key)
if n < limit then
  redis.call('ZADD', key, now, ARGV[4])
  redis.call('PEXPIRE', key, math.ceil(window * 1000))
  return {1, 0}
end
local oldest = redis.call('ZRANGE', key, n - limit, n - limit, 'WITHSCORES')
local wait = tonumber(oldest[2]) + window - now
return {0, math.ceil(wait * 1000)}
"""


class ClusterLimiter:
    """One window per key shared by every process through Redis."""

    scope = "cluster"

    def __init__(
        self,
        *,
        redis_url: str | None = None,
        client: Any = None,
        prefix: str = "router:ratelimit:",
        window: float = WINDOW,
        timeout: float = 0.1,
        cooldown: float = 5.0,
        fallback: NodeLimiter | None = None,
    ) -> None:
        self.prefix = prefix
        self.window = window
        self.timeout = timeout
        self.cooldown = cooldown
        self.fallback = fallback or NodeLimiter(window=window)
        self._url = redis_url
        self._fixed_client = client
        self._clients: dict[int, tuple[Any, Any]] = {}  # loop id → (client, script)
        self._node = f"{uuid.uuid4().hex[:12]}.{os.getpid()}"
        self._seq = itertools.count()
        self._down_until = 0.0  # monotonic; skip Redis until then
        self._degraded = False

    @property
    def degraded(self) -> bool:
        return self._degraded

    def _script(self) -> Any:
        loop_id = id(asyncio.get_running_loop())
        entry = self._clients.get(loop_id)
        if entry is None:
            client = self._fixed_client
            if client is None:
                url = self._url if self._url is not None else settings.REDIS_URL
                client = aioredis.Redis.from_url(
                    url,
                    socket_timeout=self.timeout,
                    socket_connect_timeout=self.timeout,
                    retry_on_timeout=False,
                )
            entry = (client, client.register_script(_LUA))
            self._clients[loop_id] = entry
        return entry[1]

    async def acquire(self, bucket: str, limit: int, now: float) -> tuple[bool, int]:
        loop = asyncio.get_running_loop()
        if loop.time() < self._down_until:
            return self.fallback.hit(bucket, limit, now)
        member = f"{now:.6f}:{self._node}:{next(self._seq)}"
        try:
            async with asyncio.timeout(self.timeout * 3):
                allowed, wait_ms = await self._script()(
                    keys=[self.prefix + bucket],
                    args=[
                        repr(float(now)),
                        repr(float(self.window)),
                        int(limit),
                        member,
                    ],
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._down_until = loop.time() + self.cooldown
            if not self._degraded:
                self._degraded = True
                log.warning(
                    "cluster rate limit unavailable (%s); counting per node until Redis answers",
                    type(exc).__name__,
                )
            return self.fallback.hit(bucket, limit, now)
        if self._degraded:
            self._degraded = False
            log.info("cluster rate limit restored")
        if int(allowed):
            return True, 0
        return False, _retry_after(int(wait_ms) / 1000.0)

    async def aclose(self) -> None:
        for client, _ in self._clients.values():
            if client is not self._fixed_client:
                await client.aclose()
        self._clients.clear()


def make_limiter(scope: str = "node", **options: Any) -> NodeLimiter | ClusterLimiter:
    """The limiter for `api_keys.rate_limit_scope` ("node" | "cluster")."""
    if scope == "node":
        return NodeLimiter(**options)
    if scope == "cluster":
        return ClusterLimiter(**options)
    raise ValueError(
        f"api_keys.rate_limit_scope must be 'node' or 'cluster', not {scope!r}"
    )


def limiter_for(scope: str, previous: Limiter | None) -> Limiter:
    """The limiter after a routing reload: `previous` (its windows intact)
    unless `api_keys.rate_limit_scope` changed, else a new one of `scope`."""
    if previous is not None and previous.scope == scope:
        return previous
    options = {"prefix": settings.ROUTER_REDIS_PREFIX + "ratelimit:"} if scope == "cluster" else {}
    return make_limiter(scope, **options)
