"""Recent request observations (MIX-6), read from the node's capped Redis list.

Web processes LPUSH one JSON object per answered request (router.observe);
newest first. A malformed entry is skipped; Redis being down is reported on
the page, never raised.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from redis.exceptions import RedisError

from router import redis as router_redis
from router.observe import LIST_MAX, RECENT_MAX, recent_key

from .selectors import iso, rounded

log = logging.getLogger(__name__)

_USAGE_KEYS = (
    ("prompt_tokens", "input"),
    ("input_tokens", "input"),
    ("completion_tokens", "output"),
    ("output_tokens", "output"),
)


def usage_summary(usage: Any) -> dict[str, int] | None:
    """{"input": n, "output": m} from OpenAI or Responses/Anthropic usage shapes."""
    if not isinstance(usage, dict):
        return None
    out: dict[str, int] = {}
    for key, short in _USAGE_KEYS:
        value = usage.get(key)
        if isinstance(value, int) and short not in out:
            out[short] = value
    return out or None


def _details(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, dict):
        return []
    return [{"backend": str(k), "detail": str(v)} for k, v in list(value.items())[:LIST_MAX]]


def observation_row(obs: dict[str, Any]) -> dict[str, Any]:
    """The displayed subset of one observation (known fields only)."""
    hops = obs.get("hops") or []
    return {
        "ts": iso(obs["ts"]) if isinstance(obs.get("ts"), int | float) else None,
        "request_id": str(obs.get("request_id") or ""),
        "endpoint": str(obs.get("endpoint") or ""),
        "model": str(obs.get("model") or ""),
        "routed_model": obs.get("routed_model"),
        "key": obs.get("key"),
        "provider": obs.get("provider"),
        "kind": obs.get("kind"),
        "path": obs.get("path"),
        "served": obs.get("served"),
        "status": obs.get("status"),
        "error": obs.get("error"),
        "queue": obs.get("queue"),
        "queue_ms": rounded(obs.get("queue_ms")),
        "hops": [str(h) for h in hops] if isinstance(hops, list) else [],
        "attempts": obs.get("attempts"),
        "failures": [str(f) for f in obs.get("failures") or []],
        # What each failed backend said (a CLI's stderr tail, a provider's
        # error): for the operator, never the client; capped by observe.bounded.
        "failure_details": _details(obs.get("failure_details")),
        "usage": usage_summary(obs.get("usage")),
        "latency_ms": rounded(obs.get("latency_ms")),
        "ttft_ms": rounded(obs.get("ttft_ms")),
        "stream_error": bool(obs.get("stream_error")),
        "client_disconnected": bool(obs.get("client_disconnected")),
        # Disaggregated prefill/decode (docs/disaggregation.md).
        "routing_path": obs.get("routing_path"),
        "prefill_backend": obs.get("prefill_backend"),
        "prefill_ms": rounded(obs.get("prefill_ms")),
        "decode_ttft_ms": rounded(obs.get("decode_ttft_ms")),
    }


def recent_requests(limit: int = 50) -> dict[str, Any]:
    """{'available': bool, 'error': str|None, 'items': [row, ...]} newest first."""
    limit = max(1, min(limit, RECENT_MAX))
    try:
        raw = router_redis.sync_client().lrange(recent_key(), 0, limit - 1)
    except RedisError as exc:
        return {"available": False, "error": f"Redis unavailable ({type(exc).__name__})", "items": []}
    items = []
    for entry in raw:
        try:
            obs = orjson.loads(entry)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obs, dict):
            items.append(observation_row(obs))
    return {"available": True, "error": None, "items": items}
