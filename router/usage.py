"""Usage per API key, counted by the observation drainer (never per request).

`add(pipe, items)` is called by `router.observe.run_drainer` with the batch
of (bounded) observations it drains every quarter second; it queues ONE
script call per hour bucket on the drainer's pipeline, which HINCRBYs the
batch's per-key counts into the Redis hash

    <prefix>usage:<hour epoch>   fields  <key_id>|requests  |errors  |prompt
                                         <key_id>|completion  |hits  |last  |name  |source

(`|hits`: the requests the response cache answered, router/respcache/; they
count in `|requests` too, and carry no tokens: no backend spent any.)

(`|last` keeps the maximum observation time: the script compares before it
writes, so drainers of several web processes never move it back). Every
hour hash has a TTL (BUFFER_TTL_S): the buffer survives a web process restart
and waits for the keys app's fold (keys/tasks.py `fold_usage`, every ~30 s),
which moves it into the database.

Bounds: the key ids are the router's own key records (operator and
coordinator keys; requests with no valid key carry no key_id and are not
counted here). Still, at most KEYS_MAX distinct keys are counted per hour
(a per-hour id set, `<prefix>usage:<hour>:keys`, TTL two hours past the
hour); beyond it a key's requests go to the one OVERFLOW id, so no client
can grow the buffer without bound. The router never reads the key table:
the name and source come from the observation.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

from django.conf import settings

log = logging.getLogger(__name__)

KEYS_MAX = 10_000  # distinct keys per hour bucket (keys_max())
BUFFER_TTL_S = 3 * 86_400  # an unfolded hour waits this long in Redis
HOUR = 3600
OVERFLOW = "_overflow"  # the id of every key over the per-hour cap
OVERFLOW_NAME = "(keys over the per-hour cap)"
COUNTERS = ("requests", "errors", "prompt", "completion", "hits")
PROMPT_KEYS = ("prompt_tokens", "input_tokens")
COMPLETION_KEYS = ("completion_tokens", "output_tokens")


def prefix() -> str:
    return settings.ROUTER_REDIS_PREFIX + "usage:"


def hour_key(hour: int) -> str:
    """The live buffer hash of the hour starting at `hour` (epoch s)."""
    return f"{prefix()}{hour}"


def hours_key() -> str:
    """Set of the hours that have a live buffer hash (the fold's index)."""
    return prefix() + "hours"


def pending_key() -> str:
    """Set of the buffer hashes a fold has claimed (renamed) but not yet deleted."""
    return prefix() + "pending"


def fold_key(hour: int, token: str) -> str:
    return f"{prefix()}fold:{hour}:{token}"


def keys_max() -> int:
    """The per-hour cap: the Django setting or the environment variable
    ROUTER_USAGE_KEYS_MAX, else KEYS_MAX."""
    value = getattr(settings, "ROUTER_USAGE_KEYS_MAX", None) or os.environ.get("ROUTER_USAGE_KEYS_MAX")
    try:
        return max(1, int(value)) if value else KEYS_MAX
    except ValueError:
        return KEYS_MAX


# KEYS: hour hash, hours index, per-hour id set.
# ARGV: hour, cap, ttl, idset ttl, then 9 per key:
#   id, name, source, requests, errors, prompt, completion, last, hits.
_ADD = """
local h, idx, ids = KEYS[1], KEYS[2], KEYS[3]
local cap, ttl, idttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local overflow = ARGV[5]
for i = 6, #ARGV, 9 do
  local id = ARGV[i]
  if redis.call('SISMEMBER', ids, id) == 0 then
    if redis.call('SCARD', ids) < cap then
      redis.call('SADD', ids, id)
    else
      id = overflow
    end
  end
  local p = id .. '|'
  if id ~= overflow then
    redis.call('HSET', h, p .. 'name', ARGV[i + 1], p .. 'source', ARGV[i + 2])
  end
  redis.call('HINCRBY', h, p .. 'requests', ARGV[i + 3])
  if ARGV[i + 4] ~= '0' then redis.call('HINCRBY', h, p .. 'errors', ARGV[i + 4]) end
  if ARGV[i + 5] ~= '0' then redis.call('HINCRBY', h, p .. 'prompt', ARGV[i + 5]) end
  if ARGV[i + 6] ~= '0' then redis.call('HINCRBY', h, p .. 'completion', ARGV[i + 6]) end
  if ARGV[i + 8] ~= '0' then redis.call('HINCRBY', h, p .. 'hits', ARGV[i + 8]) end
  local last = tonumber(redis.call('HGET', h, p .. 'last') or '0')
  if tonumber(ARGV[i + 7]) > last then redis.call('HSET', h, p .. 'last', ARGV[i + 7]) end
end
redis.call('EXPIRE', h, ttl)
redis.call('EXPIRE', ids, idttl)
redis.call('SADD', idx, ARGV[1])
redis.call('EXPIRE', idx, ttl)
return 1
"""


def _tokens(usage: object, names: tuple[str, ...]) -> int:
    if not isinstance(usage, dict):
        return 0
    for name in names:
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def tally(items: Iterable[dict]) -> dict[int, dict[str, list[Any]]]:
    """{hour: {key_id: [name, source, requests, errors, prompt, completion, last, hits]}}
    of the observations that name a key."""
    out: dict[int, dict[str, list[Any]]] = {}
    for obs in items:
        key_id = obs.get("key_id")
        if not isinstance(key_id, str) or not key_id:
            continue
        ts = obs.get("ts")
        if not isinstance(ts, (int, float)):
            continue
        hour = int(ts // HOUR * HOUR)
        row = out.setdefault(hour, {}).get(key_id)
        if row is None:
            row = out[hour][key_id] = ["", "", 0, 0, 0, 0, 0.0, 0]
        row[0] = str(obs.get("key") or "")
        row[1] = str(obs.get("key_source") or "")
        row[2] += 1
        status = obs.get("status")
        if isinstance(status, int) and status >= 400:
            row[3] += 1
        usage = obs.get("usage")
        row[4] += _tokens(usage, PROMPT_KEYS)
        row[5] += _tokens(usage, COMPLETION_KEYS)
        row[6] = max(row[6], float(ts))
        if obs.get("cache") == "hit":
            row[7] += 1
    return out


def add(pipe: Any, items: Iterable[dict]) -> None:
    """Queue the batch's per-key counts on the drainer's pipeline (one script
    call per hour in the batch, normally one); never raises."""
    try:
        cap = keys_max()
        for hour, keys in tally(items).items():
            args: list[Any] = [hour, cap, BUFFER_TTL_S, 3 * HOUR, OVERFLOW]
            for key_id, (name, source, requests, errors, prompt, completion, last, hits) in keys.items():
                args += [key_id, name, source, requests, errors, prompt, completion, repr(last), hits]
            pipe.eval(_ADD, 3, hour_key(hour), hours_key(), f"{hour_key(hour)}:keys", *args)
    except Exception:  # bookkeeping must never take the drainer down
        log.exception("usage not counted")
