"""Usage per API key: fold the router's Redis buffer into KeyUsage, and read
DB rows + what is still buffered (so every reader is current within the
drainer's quarter second).

The buffer (router/usage.py) is one Redis hash per UTC hour. The fold
(`fold`, run by the Celery task keys.fold_usage every ~30 s) moves it out in
three steps, each safe to die after:

1. claim: one script RENAMEs every live hour hash to `usage:fold:<hour>:<token>`
   and adds that name to the `usage:pending` set (atomic with the drainer's
   writes: a count lands either in the claimed hash or in a fresh one);
2. apply: one DB transaction records the claimed name in UsageFold (unique)
   and adds the counts to KeyUsage with F() increments;
3. release: DEL the claimed hash and SREM it from `usage:pending`.

Every run starts by folding whatever `usage:pending` still lists, so a run
that died after 1 is finished by the next; one that died after 2 finds its
name in UsageFold and only releases. Nothing is counted twice or lost by a
task dying midway. What can be lost: counts still in Redis when Redis itself
loses its data (a restart without persistence) — at most one fold interval
(~30 s) of usage, or longer while no tasks process runs — and counts of an
hour not folded within router.usage.BUFFER_TTL_S (3 days).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, Max, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone
from redis.exceptions import RedisError

from router import usage as buffer
from router.redis import sync_client

from .models import ApiKey, KeyUsage, UsageFold

log = logging.getLogger(__name__)

# KEYS: hours index, pending set. ARGV: usage key prefix, token, ttl.
_CLAIM = """
for _, hour in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local src = ARGV[1] .. hour
  if redis.call('EXISTS', src) == 1 then
    local dst = ARGV[1] .. 'fold:' .. hour .. ':' .. ARGV[2]
    redis.call('RENAME', src, dst)
    redis.call('SADD', KEYS[2], dst)
  end
  redis.call('SREM', KEYS[1], hour)
end
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('EXPIRE', KEYS[2], ARGV[3]) end
return redis.call('SMEMBERS', KEYS[2])
"""


# The fields a usage row has (a KeyUsage row's and a Usage's), in Usage's order.
ROW_FIELDS = (
    "key_ref", "hour", "name", "source", "requests", "errors", "prompt_tokens", "completion_tokens", "last_used_at",
    "cache_hits",
)  # fmt: skip


@dataclass(slots=True)
class Usage:
    key_ref: str
    hour: datetime | None = None  # None in totals over several hours
    name: str = ""
    source: str = ""
    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    last_used_at: datetime | None = None
    cache_hits: int = 0  # of `requests`, answered from the response cache
    hours: set[datetime] = field(default_factory=set, repr=False)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def merge(self, other: Usage, *, newer_name: bool) -> None:
        self.requests += other.requests
        self.errors += other.errors
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cache_hits += other.cache_hits
        if other.last_used_at and (self.last_used_at is None or other.last_used_at > self.last_used_at):
            self.last_used_at = other.last_used_at
        if other.name and (newer_name or not self.name):
            self.name = other.name
        if other.source and (newer_name or not self.source):
            self.source = other.source


def _hour_dt(hour: int) -> datetime:
    return datetime.fromtimestamp(hour, UTC)


def parse(hour: int, data: dict[bytes, bytes]) -> dict[str, Usage]:
    """The rows of one buffer hash, by key ref."""
    rows: dict[str, Usage] = {}
    for raw_field, raw_value in data.items():
        ref, _, what = raw_field.decode(errors="replace").rpartition("|")
        if not ref:
            continue
        row = rows.get(ref)
        if row is None:
            row = rows[ref] = Usage(ref, _hour_dt(hour))
            if ref == buffer.OVERFLOW:
                row.name = buffer.OVERFLOW_NAME
        value = raw_value.decode(errors="replace")
        if what == "name":
            row.name = value
        elif what == "source":
            row.source = value
        elif what == "last":
            row.last_used_at = datetime.fromtimestamp(float(value), UTC)
        elif what in ("requests", "errors"):
            setattr(row, what, int(value))
        elif what == "prompt":
            row.prompt_tokens = int(value)
        elif what == "completion":
            row.completion_tokens = int(value)
        elif what == "hits":
            row.cache_hits = int(value)
    return rows


def _claimed_hour(name: str) -> int:
    return int(name.rsplit(":", 2)[-2])


# -- fold ---------------------------------------------------------------------


def claim(client: Any = None) -> list[str]:
    """Step 1: rename the live hour hashes; the names of all claimed hashes."""
    client = client or sync_client()
    token = uuid.uuid4().hex[:12]
    names = client.eval(
        _CLAIM, 2, buffer.hours_key(), buffer.pending_key(), buffer.prefix(), token, buffer.BUFFER_TTL_S
    )
    return sorted(n.decode() for n in names)


def apply(name: str, client: Any = None) -> bool:
    """Step 2: add one claimed hash to KeyUsage in one transaction (False if
    it was already folded, or is being folded by another run)."""
    client = client or sync_client()
    if UsageFold.objects.filter(name=name).exists():
        return False
    rows = parse(_claimed_hour(name), client.hgetall(name))
    try:
        with transaction.atomic():
            UsageFold.objects.create(name=name)
            for row in rows.values():
                _upsert(row)
    except IntegrityError:  # another run recorded it first
        return False
    return True


def _upsert(row: Usage) -> None:
    updates: dict[str, Any] = {
        "requests": F("requests") + row.requests,
        "errors": F("errors") + row.errors,
        "prompt_tokens": F("prompt_tokens") + row.prompt_tokens,
        "completion_tokens": F("completion_tokens") + row.completion_tokens,
        "cache_hits": F("cache_hits") + row.cache_hits,
    }
    if row.name:
        updates["name"] = row.name[:200]
    if row.source:
        updates["source"] = row.source[:16]
    if row.last_used_at is not None:
        at = Value(row.last_used_at)
        updates["last_used_at"] = Greatest(Coalesce(F("last_used_at"), at), at)
    qs = KeyUsage.objects.filter(key_ref=row.key_ref[:255], hour=row.hour)
    if qs.update(**updates):
        return
    try:
        with transaction.atomic():  # a savepoint: a concurrent insert is retried as an update
            KeyUsage.objects.create(
                key_ref=row.key_ref[:255],
                hour=row.hour,
                name=row.name[:200],
                source=row.source[:16],
                requests=row.requests,
                errors=row.errors,
                prompt_tokens=row.prompt_tokens,
                completion_tokens=row.completion_tokens,
                cache_hits=row.cache_hits,
                last_used_at=row.last_used_at,
            )
    except IntegrityError:
        qs.update(**updates)


def release(name: str, client: Any = None) -> None:
    """Step 3: drop a claimed hash whose counts are in the database."""
    client = client or sync_client()
    pipe = client.pipeline()
    pipe.delete(name)
    pipe.srem(buffer.pending_key(), name)
    pipe.execute()


def fold(client: Any = None) -> dict[str, int]:
    """Move the whole Redis buffer into KeyUsage (claim → apply → release
    for every claimed hash, leftovers of earlier runs included)."""
    client = client or sync_client()
    folded = released = 0
    for name in claim(client):
        if apply(name, client):
            folded += 1
        if UsageFold.objects.filter(name=name).exists():
            release(name, client)
            released += 1
    cutoff = timezone.now() - timedelta(seconds=buffer.BUFFER_TTL_S + 86_400)
    UsageFold.objects.filter(folded_at__lt=cutoff).delete()  # no claimed hash can outlive its TTL
    return {"folded": folded, "released": released}


# -- reads ----------------------------------------------------------------------


def window_start(*, days: float | None = None, since: datetime | None = None, now: datetime | None = None) -> datetime:
    """The first hour of a window: `since` (floored to its hour), or the last
    `days` × 24 hour buckets including the current one."""
    if since is not None:
        since = since if since.tzinfo else since.replace(tzinfo=UTC)
        return since.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    now = (now or timezone.now()).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return now - timedelta(hours=max(1, round((days or 1) * 24)) - 1)


def buffered(start: datetime, key_ref: str | None = None, client: Any = None) -> list[Usage]:
    """Hourly rows still in Redis (live and claimed-not-yet-folded hashes)
    from `start` on; [] when Redis is unreachable."""
    first = int(start.timestamp())
    try:
        client = client or sync_client()
        hours = sorted(h for h in (int(x) for x in client.smembers(buffer.hours_key())) if h >= first)
        pending = [n.decode() for n in client.smembers(buffer.pending_key())]
        pending = [n for n in pending if _claimed_hour(n) >= first]
        pipe = client.pipeline(transaction=False)
        for hour in hours:
            pipe.hgetall(buffer.hour_key(hour))
        for name in pending:
            pipe.hgetall(name)
        results = pipe.execute()
    except RedisError as exc:
        log.warning("usage buffer not read: %s", type(exc).__name__)
        return []
    done = set(UsageFold.objects.filter(name__in=pending).values_list("name", flat=True)) if pending else set()
    out: list[Usage] = []
    sources = [*hours, *(_claimed_hour(n) for n in pending)]
    names = [None] * len(hours) + pending
    for hour, name, data in zip(sources, names, results, strict=True):
        if name in done:  # folded; only its release is outstanding
            continue
        out.extend(r for r in parse(hour, data).values() if key_ref is None or r.key_ref == key_ref)
    return out


def hourly(start: datetime, key_ref: str | None = None) -> list[Usage]:
    """Per key per hour from `start` on: DB rows + the Redis buffer, newest first."""
    extra = buffered(start, key_ref)
    qs = KeyUsage.objects.filter(hour__gte=start)
    if key_ref is not None:
        qs = qs.filter(key_ref=key_ref)
    merged: dict[tuple[str, datetime], Usage] = {}
    for r in qs.order_by():
        merged[(r.key_ref, r.hour)] = Usage(*(getattr(r, f) for f in ROW_FIELDS))
    for row in extra:
        assert row.hour is not None
        have = merged.get((row.key_ref, row.hour))
        if have is None:
            merged[(row.key_ref, row.hour)] = row
        else:
            have.merge(row, newer_name=True)
    return sorted(merged.values(), key=lambda r: (-r.hour.timestamp() if r.hour else 0, r.key_ref))


def _day(hour: datetime) -> datetime:
    return hour.replace(hour=0)


def group(rows: Iterable[Usage], by: str = "key") -> list[Usage]:
    """Rows summed by `key` (totals, most requests first), or per key by
    `day` / `hour` (UTC, newest first)."""
    out: dict[tuple[str, datetime | None], Usage] = {}
    for row in sorted(rows, key=lambda r: r.hour or datetime.min.replace(tzinfo=UTC)):  # oldest first: newest name wins
        assert row.hour is not None
        bucket = None if by == "key" else (_day(row.hour) if by == "day" else row.hour)
        have = out.get((row.key_ref, bucket))
        if have is None:
            have = out[(row.key_ref, bucket)] = Usage(row.key_ref, bucket)
        have.merge(row, newer_name=True)
        have.hours.add(row.hour)
    if by == "key":
        return sorted(out.values(), key=lambda r: (-r.requests, -r.tokens, r.key_ref))
    return sorted(out.values(), key=lambda r: (-(r.hour.timestamp() if r.hour else 0), r.key_ref))


def totals(start: datetime, key_ref: str | None = None) -> list[Usage]:
    return group(hourly(start, key_ref), "key")


def last_used(refs: Iterable[str] | None = None, *, since: datetime | None = None) -> dict[str, datetime]:
    """Each key's last use (DB + buffer), ever or from the hour `since` on."""
    qs = KeyUsage.objects.all()
    if refs is not None:
        refs = list(refs)
        qs = qs.filter(key_ref__in=refs)
    if since is not None:
        qs = qs.filter(hour__gte=since)
    out: dict[str, datetime] = {
        ref: at for ref, at in qs.values("key_ref").annotate(at=Max("last_used_at")).values_list("key_ref", "at") if at
    }
    oldest = window_start(since=timezone.now() - timedelta(seconds=buffer.BUFFER_TTL_S))
    for row in buffered(max(oldest, since) if since else oldest):
        if refs is not None and row.key_ref not in refs:
            continue
        if row.last_used_at and (row.key_ref not in out or row.last_used_at > out[row.key_ref]):
            out[row.key_ref] = row.last_used_at
    return out


def series(key_ref: str, start: datetime, now: datetime | None = None) -> dict[str, Any]:
    """The detail page's plot: requests and tokens per hour, every hour of the window."""
    by_hour = {r.hour: r for r in group(hourly(start, key_ref), "hour")}
    end = (now or timezone.now()).astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    hours = []
    at = start
    while at <= end:
        hours.append(at)
        at += timedelta(hours=1)

    def values(attr: str) -> list[int]:
        return [getattr(by_hour[h], attr) if h in by_hour else 0 for h in hours]

    return {
        "t": [int(h.timestamp()) for h in hours],
        "series": [
            {"label": "requests", "values": values("requests")},
            {"label": "prompt tokens", "values": values("prompt_tokens")},
            {"label": "completion tokens", "values": values("completion_tokens")},
        ],
        "unit": "per hour",
    }


CSV_HEADER = ("hour_utc", *(f for f in ROW_FIELDS if f != "hour"))


def csv_cell(value: object) -> str:
    """A CSV cell a spreadsheet never runs as a formula (CSV injection)."""
    text = "" if value is None else (value.isoformat() if isinstance(value, datetime) else str(value))
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def csv_rows(rows: Iterable[Usage]) -> Iterable[list[str]]:
    yield list(CSV_HEADER)
    for r in rows:
        # CSV_HEADER's order: the hour first.
        yield [csv_cell(r.hour or "")] + [csv_cell(getattr(r, f)) for f in ROW_FIELDS if f != "hour"]


def key_for_ref(ref: str) -> ApiKey | None:
    """The key row a usage ref names (None once deleted, or for the overflow bucket)."""
    source, _, ident = ref.partition(":")
    if source == "operator" and ident.isdigit():
        return ApiKey.objects.filter(source="operator", pk=int(ident)).first()
    if source == "coordinator" and ident:
        return ApiKey.objects.filter(source="coordinator", key_id=ident).first()
    return None
