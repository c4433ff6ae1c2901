"""`/api/v1/response-cache`: the response cache's settings and shared entry
count, and its purge (docs/response-cache.md).

The purge is `manage.py purgeresponsecache`'s own (`shared.purge`): the
deployment's Redis entries are deleted and the purge is published to every
web process, which drops the same from its memory tier. The count is a
bounded SCAN (`shared.count`): exact when the walk finished, else a lower
bound (`complete` false), so a big shared Redis never makes it slow.
"""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from redis.exceptions import RedisError

from router.respcache import shared
from router.selectors import routing_document

from . import audit
from .auth import actor_of
from .errors import InvalidRequest, RedisUnavailable

router = Router(tags=["response cache"])


class SharedEntries(Schema):
    count: int | None = Field(description="Redis entries of this deployment found; null when Redis is unavailable")
    complete: bool = Field(description="false: the bounded scan stopped early, `count` is a lower bound")


class ResponseCacheOut(Schema):
    enabled: bool
    ttl: float = Field(description="seconds an entry is served")
    max_bytes: int = Field(description="memory tier per web process (LRU)")
    max_entry_bytes: int = Field(description="larger answers are never stored")
    shared: bool = Field(description="the Redis tier under the deployment's namespace")
    scope: str = Field(description="key or global")
    deterministic_only: bool
    shared_entries: SharedEntries


class PurgeQuery(Schema):
    model: str | None = Field(None, description="only this model's entries (the name requests are routed to)")


class Purged(Schema):
    model: str | None
    deleted: int = Field(description="shared entries deleted; every web process drops its memory tier's")


@router.get("", response=ResponseCacheOut, summary="The response cache's settings and shared entry count")
def get_response_cache(request: HttpRequest) -> dict:
    cfg = routing_document().response_cache
    try:
        found, complete = shared.count()
        entries = {"count": found, "complete": complete}
    except RedisError:
        entries = {"count": None, "complete": False}
    return {**cfg.model_dump(), "shared_entries": entries}


@router.post("/purge", response=Purged, summary="Purge the response cache: every entry, or one model's")
def purge_response_cache(request: HttpRequest, q: Query[PurgeQuery]) -> dict:
    if q.model is not None and not q.model.strip():
        raise InvalidRequest("model needs a model name (or leave it out to purge every model).", param="model")
    try:
        deleted = shared.purge(q.model)
    except RedisError as exc:
        raise RedisUnavailable(f"Redis is unavailable ({type(exc).__name__}); nothing was purged.") from exc
    # After the fact (Redis has no transaction with the database): an entry
    # exists exactly when the purge ran.
    audit.record(actor_of(request).name, "response_cache.purge",
                 f"model:{q.model}" if q.model is not None else "response_cache", detail={"deleted": deleted})
    return {"model": q.model, "deleted": deleted}
