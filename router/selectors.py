"""Reads of the routing mirror: compile the immutable Snapshot (off the hot path).

The Snapshot fields other apps own (the keyring, the Host ingress table) come
from the snapshot parts they register in router.extensions.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from . import extensions
from .config_schema import RouterFile, interpolate
from .core.backend import BackendSpec
from .core.health import HealthPolicy
from .core.ipnets import parse_networks
from .core.secret import Secret
from .core.snapshot import QueuePolicy, RetryPolicy, Snapshot, group_by_model
from .models import Backend, ConfigDocument
from .revision import current_revision

log = logging.getLogger(__name__)


def _models(row: Backend) -> tuple[str, ...]:
    names = list(row.models or ())
    extra = row.extra or {}
    if extra.get("discover_models"):
        names += [n for n in extra.get("discovered") or () if n not in names]
    return tuple(names)


def _spec(row: Backend) -> BackendSpec:
    api_key = interpolate(row.api_key, f"backend {row.name}.api_key") if row.api_key else ""
    headers = tuple((str(k), str(interpolate(v))) for k, v in (row.extra or {}).get("headers", {}).items())
    # A ${VAR} in the URL (e.g. its password) is resolved here, as the api_key.
    url = interpolate(row.url, f"backend {row.name}.url") if "${" in row.url else row.url
    return BackendSpec(
        name=row.name,
        url=url.rstrip("/"),
        kind=row.kind,
        models=_models(row),
        served_model=row.served_model or None,
        weight=row.weight,
        capacity=row.capacity,
        priority=row.priority,
        api_key=Secret(api_key) if api_key else None,
        source=row.source,
        connect_timeout=row.connect_timeout,
        read_timeout=row.read_timeout,
        headers=headers,
    )


def document_digest() -> str:
    """The digest of the YAML the mirror holds ("" before the first sync)."""
    return ConfigDocument.objects.filter(pk=1).values_list("digest", flat=True).first() or ""


def routing_document() -> RouterFile:
    """The YAML as last applied (minus backends), `${ENV}` resolved here."""
    doc = ConfigDocument.objects.filter(pk=1).values_list("document", flat=True).first() or {}
    return RouterFile.model_validate(interpolate(doc))


def compile_snapshot() -> Snapshot:
    revision = current_revision()
    cfg = routing_document()
    backends = {row.name: _spec(row) for row in Backend.objects.all()}
    # The keyring, the Host ingress table…: compiled by the apps that own them.
    # A part may also override a field compiled from the document below
    # (ROUTER mode forces api_keys_mode to "blocking").
    parts = {name: compile(cfg) for name, compile in extensions.snapshot_parts().items()}
    by_model = group_by_model(backends)
    for name in parts.get("listed", ()):
        by_model.setdefault(name, ())
    h = cfg.health
    fields: dict[str, Any] = dict(
        revision=revision,
        backends=backends,
        by_model=by_model,
        fallback_chains={k: tuple(v) for k, v in cfg.fallback.fallback_chains.items()},
        strategy=cfg.selection_strategy,
        retry=RetryPolicy(
            max_attempts=cfg.retry.max_attempts,
            backoff_s=cfg.retry.backoff,
            retry_on_status=frozenset(cfg.retry.retry_on_status),
        ),
        queue=QueuePolicy(max_wait_s=cfg.queue.max_wait, max_waiting=cfg.queue.max_waiting),
        health=HealthPolicy(
            failure_threshold=h.failure_threshold,
            cooldown_s=h.cooldown,
            interval_s=h.interval,
            timeout_s=h.timeout,
            path=h.path,
            unhealthy_threshold=h.unhealthy_threshold,
            healthy_threshold=h.healthy_threshold,
        ),
        health_enabled=h.enabled,
        max_body_bytes=cfg.server.max_body_bytes,
        max_response_bytes=cfg.server.max_response_bytes,
        trusted_proxies=parse_networks(cfg.server.trusted_proxies),
        api_keys_mode=cfg.api_keys.mode,
        rate_limit_scope=cfg.api_keys.rate_limit_scope,
        created=int(time.time()),
    )
    fields.update(parts)
    return Snapshot(**fields)
