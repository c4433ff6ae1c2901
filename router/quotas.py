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

Leases (scope "cluster"): a request bucket of a high rate (a global limit of
thousands a second, a busy backend's rps) would cost a Redis call per
request. So when the script takes a request's token from such a bucket it
also takes up to `lease_size` more, if the bucket has them, and this process
spends those on its next requests without asking Redis; what is left of a
lease after `LEASE_TTL` is dropped. Tokens are only ever spent after they
left the shared bucket, so a limit is never exceeded; a lease that goes
unused is at most `LEASE_S` of the rate the cluster admits less in
`LEASE_TTL`. A bucket of a low rate (under `2 / LEASE_S` a second, a
client's per-IP bucket) is never leased: every take asks Redis, as before.
A tokens-per-minute bucket's admission (is it in debt?) is held the same
way: once Redis said it is not, it is taken as not for `LEASE_TTL` (its
answers' tokens reach Redis every `CHARGE_EVERY` anyway).
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

# KEYS: the buckets; ARGV[1] = now, then per bucket: per_s, burst, cost,
# need, lease (the most extra whole tokens to take for this process's lease).
# Returns {1, 0, -1, leased per bucket…} when taken, else {0, wait ms, index
# (0-based) of the bucket that waits longest} and nothing is taken. A bucket
# is a hash {l = level, t = time} that expires once it would be full again.
_TAKE = """
local now = tonumber(ARGV[1])
local levels, times = {}, {}
local wait, worst = 0, -1
for i, key in ipairs(KEYS) do
  local b = 1 + (i - 1) * 5
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
local answer = {1, 0, -1}
for i, key in ipairs(KEYS) do
  local b = 1 + (i - 1) * 5
  local rate, burst, cost = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local level = math.max(levels[i] - cost, -burst)
  local leased = math.max(0, math.min(tonumber(ARGV[b + 5]), math.floor(level)))
  level = level - leased
  answer[3 + i] = leased
  redis.call('HSET', key, 'l', tostring(level), 't', tostring(times[i]))
  redis.call('PEXPIRE', key, math.ceil((burst - level) / rate * 1000) + 1000)
end
return answer
"""

NEVER = -1e18  # ARGV for core.buckets.ALWAYS (-inf does not cross to Lua)
CHARGE_EVERY = 0.1  # seconds: answers' tokens are paid to Redis in one call this often
LEASE_S = 0.05  # a lease is this long of the bucket's rate (at most an eighth of its burst)
LEASE_TTL = 0.25  # seconds a lease's tokens may be spent before what is left is dropped
MAX_LEASES = 1000  # leases one process holds at once (the oldest dropped past it)


def lease_size(rate: Rate) -> int:
    """Extra tokens a take asks for a bucket of `rate`, beyond its own (0: not leased)."""
    n = math.floor(min(rate.per_s * LEASE_S, rate.burst / 8))
    return n - 1 if n >= 2 else 0


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
        self._leases: dict[str, tuple[float, float]] = {}  # bucket → (tokens, spendable until: `now` time)

    async def take(self, items: Sequence[Item], now: float) -> tuple[float, int]:
        """(0, -1) when every bucket had what it needs and paid its cost;
        else (seconds to wait, index of the longest-waiting item)."""
        if self.scope == "node":
            return self.node.take(items, now)
        loop = asyncio.get_running_loop()
        if loop.time() < self._down_until:
            return self.node.take(items, now)
        leases = self._leases
        # The buckets this process's leases can pay for (a request's token
        # each); the rest are asked of Redis, which may lease more.
        held = [i for i, (name, _r, cost, need) in enumerate(items)
                if need == 1.0 and (lease := leases.get(name)) is not None
                and lease[0] >= cost and now <= lease[1]]  # fmt: skip
        if len(held) == len(items):
            for name, _rate, cost, _need in items:
                tokens, until = leases[name]
                leases[name] = (tokens - cost, until)
            return 0.0, -1
        asked = [item for i, item in enumerate(items) if i not in held] if held else list(items)
        args: list[str | float] = [repr(float(now))]
        for _name, rate, cost, need in asked:
            extra = lease_size(rate) if cost == 1.0 and need == 1.0 else 0
            args += [repr(rate.per_s), repr(rate.burst), repr(cost), repr(need if need > NEVER else NEVER), extra]
        try:
            async with asyncio.timeout(self.timeout * 3):
                answer = await self._script()(keys=[self.prefix + i[0] for i in asked], args=args)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._down_until = loop.time() + self.cooldown
            if not self.degraded:
                self.degraded = True
                log.warning("cluster rate limits unavailable (%s); counting per process until Redis answers",
                            type(exc).__name__)
            self._leases.clear()
            return self.node.take(items, now)
        if self.degraded:
            self.degraded = False
            log.info("cluster rate limits restored")
        taken, wait_ms, worst = int(answer[0]), int(answer[1]), int(answer[2])
        if not taken:
            return wait_ms / 1000.0, (worst if not held else items.index(asked[worst]))
        for i in held:
            name, _rate, cost, _need = items[i]
            tokens, until = leases[name]
            leases[name] = (tokens - cost, until)
        for (name, _rate, cost, need), leased in zip(asked, answer[3:], strict=False):
            if int(leased) > 0 or (cost == 0.0 and need == 1.0):
                # A tokens-per-minute bucket's admission (cost 0: "not in
                # debt") holds for LEASE_TTL as a lease that never runs out.
                leases.pop(name, None)
                leases[name] = (float(leased) if cost else math.inf, now + LEASE_TTL)
                if len(leases) > MAX_LEASES:
                    del leases[next(iter(leases))]
        return 0.0, -1

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
