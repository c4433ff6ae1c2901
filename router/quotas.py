"""The token buckets of `rate_limits` and of backends' `quota` (the math in
router/core/buckets.py), in this process or shared by the cluster.

- scope "node": each web process keeps its own buckets (a limit is then per
  process: the cluster's ceiling is about limit × processes).
- scope "cluster" (the default): one bucket per name in Redis under the
  deployment's prefix, taken by one atomic script (all of a take's buckets or
  none). Callers pass the time (epoch seconds), so node clocks must be
  NTP-synced; a clock behind another's only refills a little later. When
  Redis fails or is slow (100 ms), the buckets of this process decide, one
  warning is logged, and Redis is tried again after 5 s: a limit never takes
  `/v1` down with Redis and never holds a request long.

A backend a take refuses is marked limited in this process
(`BackendState.limited_until`) for as long as its bucket says, so selection
skips it like a full one without asking Redis again per request.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from django.conf import settings

from .core.buckets import ALWAYS, Item, NodeBuckets, Rate

log = logging.getLogger(__name__)

# KEYS: the buckets; ARGV[1] = now, then per bucket: per_s, burst, cost, need.
# Returns {1, 0, -1} when taken, else {0, wait ms, index (0-based) of the
# bucket that waits longest} and nothing is taken. A bucket is a hash
# {l = level, t = time} that expires once it would be full again.
_TAKE = """
local now = tonumber(ARGV[1])
local levels, times = {}, {}
local wait, worst = 0, -1
for i, key in ipairs(KEYS) do
  local b = 1 + (i - 1) * 4
  local rate, burst, need = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 4])
  local held = redis.call('HMGET', key, 'l', 't')
  local level, t = tonumber(held[1]), tonumber(held[2])
  if level == nil or t == nil then
    level, t = burst, now
  elseif now > t then
    level = math.min(burst, level + (now - t) * rate)
  end
  if now > t then t = now end
  levels[i], times[i] = level, t
  if level < need then
    local missing = (need - level) / rate
    if missing > wait then wait, worst = missing, i - 1 end
  end
end
if worst >= 0 then return {0, math.ceil(wait * 1000), worst} end
for i, key in ipairs(KEYS) do
  local b = 1 + (i - 1) * 4
  local rate, burst, cost = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local level = math.max(levels[i] - cost, -burst)
  redis.call('HSET', key, 'l', tostring(level), 't', tostring(times[i]))
  redis.call('PEXPIRE', key, math.ceil((burst - level) / rate * 1000) + 1000)
end
return {1, 0, -1}
"""

NEVER = -1e18  # ARGV for core.buckets.ALWAYS (-inf does not cross to Lua)
CHARGE_EVERY = 0.1  # seconds: answers' tokens are paid to Redis in one call this often


class QuotaStore:
    """Buckets of one scope (`scope`); `take` never raises."""

    def __init__(self, scope: str, *, prefix: str | None = None, redis_url: str | None = None,
                 timeout: float = 0.1, cooldown: float = 5.0) -> None:
        if scope not in ("node", "cluster"):
            raise ValueError(f"rate_limits.scope must be 'node' or 'cluster', not {scope!r}")
        self.scope = scope
        self.node = NodeBuckets()
        self.prefix = (settings.ROUTER_REDIS_PREFIX if prefix is None else prefix) + "quota:"
        self.redis_url = redis_url
        self.timeout = timeout
        self.cooldown = cooldown
        self._clients: dict[int, tuple[Any, Any]] = {}  # loop id → (client, script)
        self._down_until = 0.0  # loop time; this process's buckets until then
        self.degraded = False
        self._charges: set[asyncio.Task] = set()
        self._owed: dict[str, tuple[Rate, float]] = {}  # tokens charged since the last payment
        self._flush: asyncio.TimerHandle | None = None

    async def take(self, items: Sequence[Item], now: float) -> tuple[float, int]:
        """(0, -1) when every bucket had what it needs and paid its cost;
        else (seconds to wait, index of the longest-waiting item)."""
        if self.scope == "node":
            return self.node.take(items, now)
        loop = asyncio.get_running_loop()
        if loop.time() < self._down_until:
            return self.node.take(items, now)
        args: list[str | float] = [repr(float(now))]
        for _name, rate, cost, need in items:
            args += [repr(rate.per_s), repr(rate.burst), repr(cost), repr(need if need > NEVER else NEVER)]
        try:
            async with asyncio.timeout(self.timeout * 3):
                taken, wait_ms, worst = await self._script()(keys=[self.prefix + i[0] for i in items], args=args)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._down_until = loop.time() + self.cooldown
            if not self.degraded:
                self.degraded = True
                log.warning("cluster rate limits unavailable (%s); counting per process until Redis answers",
                            type(exc).__name__)
            return self.node.take(items, now)
        if self.degraded:
            self.degraded = False
            log.info("cluster rate limits restored")
        if int(taken):
            return 0.0, -1
        return int(wait_ms) / 1000.0, int(worst)

    def charge(self, item: Item, now: float) -> None:
        """Pay what an answer cost (its tokens) without holding anyone up: at
        once in this process's buckets; in Redis, summed per bucket and paid
        by one script call for all of them every CHARGE_EVERY seconds (a
        bucket per backend: the sum is bounded by the backends)."""
        if self.scope == "node":
            self.node.take((item,), now)
            return
        name, rate, cost, _need = item
        held = self._owed.get(name)
        self._owed[name] = (rate, cost + (held[1] if held is not None else 0.0))
        if self._flush is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop (a thread): this process's buckets
                self.node.take((item,), now)
                self._owed.pop(name, None)
                return
            self._flush = loop.call_later(CHARGE_EVERY, self._pay)

    def _pay(self) -> None:
        self._flush = None
        owed, self._owed = self._owed, {}
        if owed:
            items = [(name, rate, cost, ALWAYS) for name, (rate, cost) in owed.items()]
            task = asyncio.get_running_loop().create_task(self.take(items, time.time()))
            self._charges.add(task)
            task.add_done_callback(self._charges.discard)

    def _script(self) -> Any:
        loop_id = id(asyncio.get_running_loop())
        entry = self._clients.get(loop_id)
        if entry is None:
            client = aioredis.Redis.from_url(self.redis_url or settings.REDIS_URL, socket_timeout=self.timeout,
                                             socket_connect_timeout=self.timeout, retry_on_timeout=False)
            entry = self._clients[loop_id] = (client, client.register_script(_TAKE))
        return entry[1]


def retry_after(wait: float) -> str:
    """Retry-After: whole seconds, at least 1."""
    return str(max(1, math.ceil(wait))) if math.isfinite(wait) else "60"


def store_for(scope: str, previous: QuotaStore | None) -> QuotaStore:
    """The store after a reload: `previous` (its buckets intact) unless the
    scope changed."""
    if previous is not None and previous.scope == scope:
        return previous
    return QuotaStore(scope)
