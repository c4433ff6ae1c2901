"""`/api/v1/prefix-index`: the `cache_aware` prefix index of every web
process, and its purge.

Each web process keeps its own index of what prompt prefixes it sent to
which replica (router/core/kvindex.py). The stats are what each web process
published of it in its cluster record (router/cluster.py, every 2.5 s), so
one answer covers the cluster. A purge is published on Redis
(router/prefix_purge.py) and every subscribed web process forgets one
backend's prefixes, or all of them.
"""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from redis.exceptions import RedisError

from node.cluster import read_records
from router import prefix_purge
from router.core.kvindex import BYTES_PER_ENTRY
from router.models import Backend
from router.selectors import routing_document

from . import audit
from .auth import actor_of
from .errors import InvalidRequest, NotFound, RedisUnavailable

router = Router(tags=["prefix index"])


class ProcessIndex(Schema):
    id: str = Field(description="<node>/<pid> of the web process")
    revision: int | None
    entries: int | None = Field(description="prompt blocks it holds; null: it has no index (another strategy)")
    max_entries: int | None
    replicas: int | None = Field(description="backends it holds prefixes of")
    approx_bytes: int | None = Field(description="entries × the measured size of one entry")


class PrefixIndexOut(Schema):
    strategy: str = Field(description="the configured selection_strategy")
    enabled: bool = Field(description="true when the strategy is cache_aware (only then do processes keep an index)")
    block_chars: int
    min_match: float
    max_entries: int = Field(description="the bound of each web process's index")
    max_prompt_chars: int
    processes: list[ProcessIndex] | None = Field(
        description="each live web process, as of its last heartbeat (2.5 s); null when Redis is unavailable")


class IndexPurgeQuery(Schema):
    backend: str | None = Field(None, description="only this backend's prefixes (its entries die at once)")


class IndexPurged(Schema):
    backend: str | None
    processes: int = Field(description="web processes that received the purge")


def _process(record: dict) -> dict:
    index = record.get("prefix_index") or {}
    entries = index.get("entries")
    return {"id": f"{record.get('node')}/{record.get('pid')}", "revision": record.get("revision"),
            "entries": entries, "max_entries": index.get("max_entries"), "replicas": index.get("replicas"),
            "approx_bytes": None if entries is None else entries * BYTES_PER_ENTRY}  # fmt: skip


@router.get("", response=PrefixIndexOut, summary="The cache_aware prefix index of every web process")
def get_prefix_index(request: HttpRequest) -> dict:
    cfg = routing_document()
    try:
        records = [r for r in read_records() if r.get("role") == "web"]
        processes: list[dict] | None = sorted((_process(r) for r in records), key=lambda p: p["id"])
    except RedisError:
        processes = None
    return {"strategy": cfg.selection_strategy, "enabled": cfg.selection_strategy == "cache_aware",
            **cfg.cache_aware.model_dump(), "processes": processes}  # fmt: skip


@router.post("/purge", response=IndexPurged, summary="Make every web process forget its prefixes (or one backend's)")
def purge_prefix_index(request: HttpRequest, q: Query[IndexPurgeQuery]) -> dict:
    if q.backend is not None and not Backend.objects.filter(name=q.backend).exists():
        if not q.backend.strip():
            raise InvalidRequest("backend needs a backend name (or leave it out to purge every backend).",
                                 param="backend")  # fmt: skip
        raise NotFound(f"No backend named {q.backend!r}.", param="backend")
    try:
        reached = prefix_purge.purge(q.backend)
    except RedisError as exc:
        raise RedisUnavailable(f"Redis is unavailable ({type(exc).__name__}); nothing was purged.") from exc
    # After the fact, as the response cache's purge: it changes no database row.
    audit.record(actor_of(request).name, "prefix_index.purge",
                 f"backend:{q.backend}" if q.backend is not None else "prefix_index", detail={"processes": reached})
    return {"backend": q.backend, "processes": reached}
