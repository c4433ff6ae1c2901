"""Token buckets: the router's own rate limits (`rate_limits`: global and per
client address) and the upstream quotas of its backends (`quota`: requests per
second and tokens per minute). Pure: the math, the policies and the
in-process store; router/quotas.py shares the buckets through Redis.

A bucket holds up to `burst` tokens and refills at `per_s` tokens a second; a
new bucket starts full. One `take` names several buckets and is all or
nothing: each must hold at least its `need`, and then each loses its `cost`.
A request costs 1 token of a requests-per-second bucket. A tokens-per-minute
bucket cannot know a request's tokens before its answer: admission only needs
the bucket not to be in debt (`need` 1, `cost` 0), and the answer's tokens
are `charge`d afterwards, which may take the level below zero, down to
-burst (so one huge answer blocks the backend for at most two minutes' worth).
"""

from __future__ import annotations

import ipaddress
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from .ipnets import Network, ip_allowed


@dataclass(frozen=True, slots=True)
class Rate:
    """`per_s` tokens a second, at most `burst` saved up."""

    per_s: float
    burst: float


@dataclass(frozen=True, slots=True)
class Quota:
    """A backend's upstream quota (its `quota:`): either part may be absent."""

    rps: Rate | None = None
    tpm: Rate | None = None


# One bucket of a take: (name, rate, cost, need).
Item = tuple[str, Rate, float, float]

# A charge's `need`: it always goes through.
ALWAYS = -math.inf


def request_items(name: str, quota: Quota) -> list[Item]:
    """What one request to a backend with `quota` takes from its buckets."""
    items: list[Item] = []
    if quota.rps is not None:
        items.append((f"b:{name}:r", quota.rps, 1.0, 1.0))
    if quota.tpm is not None:
        items.append((f"b:{name}:t", quota.tpm, 0.0, 1.0))
    return items


def token_item(name: str, quota: Quota, tokens: int) -> Item | None:
    """What an answer of `tokens` tokens charges to the backend's tpm bucket."""
    if quota.tpm is None or tokens <= 0:
        return None
    return (f"b:{name}:t", quota.tpm, float(tokens), ALWAYS)


@dataclass(frozen=True, slots=True)
class ClientLimits:
    """`rate_limits`: the router-wide limit, the one per client address (only
    for requests without a key: open mode's anonymous traffic) and who
    bypasses both (client networks; key names or ids)."""

    scope: str = "cluster"  # cluster (Redis) | node (each process on its own)
    total: Rate | None = None
    per_ip: Rate | None = None
    bypass_networks: tuple[Network, ...] = ()
    bypass_keys: frozenset[str] = frozenset()

    def bypassed(self, client_ip: str, key_name: str | None, key_id: str | None) -> bool:
        if key_name is not None and (key_name in self.bypass_keys or key_id in self.bypass_keys):
            return True
        # A Unix-socket client has no address (""): no network names it.
        return bool(self.bypass_networks) and client_ip != "" and ip_allowed(self.bypass_networks, client_ip)

    def items(self, client_ip: str, anonymous: bool) -> list[tuple[Item, str]]:
        """The buckets one request takes from, each with the limit's name."""
        items: list[tuple[Item, str]] = []
        if self.total is not None:
            items.append((("g", self.total, 1.0, 1.0), "global"))
        if self.per_ip is not None and anonymous and client_ip:
            items.append(((f"ip:{_canonical(client_ip)}", self.per_ip, 1.0, 1.0), "per_ip"))
        return items


def _canonical(client_ip: str) -> str:
    """One bucket per address however it is spelt (IPv6 zero runs, case,
    IPv4-mapped); an IPv6 client's bucket is its /64, the block one host
    holds, so an address per request does not make a bucket per request."""
    try:
        addr = ipaddress.ip_address(client_ip.split("%", 1)[0])
    except ValueError:
        return client_ip[:64]
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        return str(ipaddress.IPv6Network((addr, 64), strict=False).network_address) + "/64"
    return str(addr)


def refill(level: float, t: float, rate: Rate, now: float) -> float:
    if now > t:
        return min(rate.burst, level + (now - t) * rate.per_s)
    return level


class NodeBuckets:
    """In-process buckets, least recently used dropped past `max_buckets` (a
    dropped bucket comes back full, as an idle one would have refilled)."""

    def __init__(self, max_buckets: int = 100_000) -> None:
        self.max_buckets = max_buckets
        self._levels: OrderedDict[str, tuple[float, float]] = OrderedDict()  # name → (level, t)

    def __len__(self) -> int:
        return len(self._levels)

    def take(self, items: Sequence[Item], now: float) -> tuple[float, int]:
        """(0, -1) when taken; else (seconds until it would be, the index of
        the item that waits longest), and nothing is taken."""
        levels = self._levels
        current: list[float] = []
        wait, worst = 0.0, -1
        for i, (name, rate, _cost, need) in enumerate(items):
            held = levels.get(name)
            level = rate.burst if held is None else refill(held[0], held[1], rate, now)
            current.append(level)
            if level < need:
                missing = (need - level) / rate.per_s if rate.per_s > 0 else math.inf
                if missing > wait:
                    wait, worst = missing, i
        if worst >= 0:
            for name, *_ in items:  # a client refused is one that keeps asking: keep its buckets
                if name in levels:
                    levels.move_to_end(name)
            return wait, worst
        for (name, rate, cost, _need), level in zip(items, current, strict=True):
            held = levels.get(name)
            t = now if held is None else max(held[1], now)
            levels[name] = (max(level - cost, -rate.burst), t)
            levels.move_to_end(name)
        while len(levels) > self.max_buckets:
            levels.popitem(last=False)
        return 0.0, -1
