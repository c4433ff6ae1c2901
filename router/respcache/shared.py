"""The Redis tier: entries every node of the deployment shares.

    <prefix>respcache:<model tag>:<entry name, hex>   "<stored ms> <usage>\\n" + body, PX = ttl

`<prefix>` is the deployment's namespace (config/namespace.py), so two
deployments on one Redis never see each other's entries; the model tag
(key.model_tag) lets a purge by model scan only that model's keys.

Every call is async and bounded by TIMEOUT_S. A failure (Redis down, or
slower than that) makes the tier unavailable for RETRY_AFTER_S: the
requests of that time are answered without it (`x-cache: bypass`, none of
them waits for Redis), one warning per outage, and one line when it is
back. Writes go in the background, at most MAX_WRITES at a time; a write
over that is dropped (the entry is still in this process's memory).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time

from django.conf import settings

from ..redis import async_client, sync_client
from .key import model_tag
from .memory import Entry

log = logging.getLogger(__name__)

TIMEOUT_S = 0.2  # a Redis call slower than this counts as an outage
RETRY_AFTER_S = 2.0  # after a failure, Redis is not asked again for this long
MAX_WRITES = 64  # background writes in flight per process
COUNT_BUDGET_S = 0.25  # the longest a count may walk the database
COUNT_BATCH = 1000


class Unavailable(Exception):
    """The Redis tier cannot be asked now (down, slow, or in its retry pause)."""


def prefix() -> str:
    return settings.ROUTER_REDIS_PREFIX + "respcache:"


def entry_key(model: str, name: bytes) -> str:
    return f"{prefix()}{model_tag(model)}:{name.hex()}"


def purge_channel() -> str:
    """Where a purge tells every web process to drop its memory tier's entries."""
    return prefix() + "purge"


def encode(entry: Entry) -> bytes:
    return b"%d %d\n" % (round(entry.stored_at * 1000), entry.usage) + entry.body


def decode(raw: bytes, model: str, ttl_s: float) -> Entry | None:
    head, sep, body = raw.partition(b"\n")
    try:
        stored_ms, usage = head.split()
        stored_at = int(stored_ms) / 1000
    except ValueError:
        return None
    if not sep:
        return None
    return Entry(body, stored_at, stored_at + ttl_s, model, usage == b"1")


class _Health:
    __slots__ = ("down_since", "retry_at")

    def __init__(self) -> None:
        self.retry_at = 0.0  # monotonic
        self.down_since: float | None = None  # epoch, while in an outage

    def failed(self, exc: BaseException) -> None:
        self.retry_at = time.monotonic() + RETRY_AFTER_S
        if self.down_since is None:
            self.down_since = time.time()
            log.warning(
                "response cache: Redis tier unreachable (%s); answering without it "
                "(x-cache: bypass) until it is back", f"{type(exc).__name__}: {exc}"[:300] or "timeout",
            )

    def ok(self) -> None:
        if self.down_since is not None:
            log.warning("response cache: Redis tier back after %.0fs", time.time() - self.down_since)
            self.down_since = None


HEALTH = _Health()
_writes: set[asyncio.Task] = set()


def available() -> bool:
    return time.monotonic() >= HEALTH.retry_at


async def get(model: str, name: bytes, ttl_s: float) -> Entry | None:
    """The shared entry, or None; raises Unavailable (the caller bypasses the cache)."""
    if not available():
        raise Unavailable()
    try:
        async with asyncio.timeout(TIMEOUT_S):
            raw = await async_client().get(entry_key(model, name))
    except Exception as exc:  # down, slow (TimeoutError), or a broken connection
        HEALTH.failed(exc)
        raise Unavailable() from exc
    HEALTH.ok()
    return decode(raw if isinstance(raw, bytes) else raw.encode(), model, ttl_s) if raw else None


def put_later(name: bytes, entry: Entry, ttl_s: float) -> None:
    """Write the entry in the background (never awaited by the request)."""
    if not available() or len(_writes) >= MAX_WRITES:
        return
    task = asyncio.get_running_loop().create_task(_put(name, entry, ttl_s))
    _writes.add(task)
    task.add_done_callback(_writes.discard)


async def _put(name: bytes, entry: Entry, ttl_s: float) -> None:
    try:
        async with asyncio.timeout(TIMEOUT_S * 5):
            await async_client().set(entry_key(entry.model, name), encode(entry), px=max(1, round(ttl_s * 1000)))
    except Exception as exc:
        HEALTH.failed(exc)
    else:
        HEALTH.ok()


_GLOB = re.compile(r"([*?\[\]\\])")


def _pattern(model: str | None) -> str:
    return _GLOB.sub(r"\\\1", prefix()) + (f"{model_tag(model)}:*" if model is not None else "*")


def count(client=None, *, scans: int | None = None, budget_s: float = COUNT_BUDGET_S) -> tuple[int, bool]:
    """(shared entries found, whether that is all of them). SCAN walks the
    whole Redis database, other deployments' keys included, so the walk is
    bounded: for at most `budget_s` (a quarter second looks at ~100,000s of
    keys) and, when given, `scans` calls of COUNT_BATCH keys each; past that
    the number is a lower bound (False). Sync (an admin call's)."""
    client = client or sync_client()
    cursor, found, calls = 0, 0, 0
    deadline = time.monotonic() + budget_s
    while True:
        cursor, keys = client.scan(cursor, match=_pattern(None), count=COUNT_BATCH)
        found += len(keys)
        calls += 1
        if cursor == 0:
            return found, True
        if (scans is not None and calls >= scans) or time.monotonic() >= deadline:
            return found, False


def purge(model: str | None = None, client=None) -> int:
    """Delete the shared entries (of `model`), and tell every web process to
    drop its memory tier's; how many shared entries were deleted. Sync (a
    management command's)."""
    client = client or sync_client()
    pattern = _pattern(model)
    deleted = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            deleted += client.unlink(*batch)
            batch = []
    if batch:
        deleted += client.unlink(*batch)
    client.publish(purge_channel(), model if model is not None else "")
    return deleted
