"""Reads of the routing mirror: compile the immutable Snapshot (off the hot path),
or update it in place from the change log (router/revision.py).

The Snapshot fields other apps own (the keyring, the Host ingress table) come
from the snapshot parts they register in router.extensions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import replace
from typing import Any

from immutables import Map
from pydantic import ValidationError

from . import extensions, global_prompts
from .config_schema import CliConfig, QuotaConfig, RateConfig, RouterFile, interpolate
from .core.backend import BackendSpec, CliSpec
from .core.buckets import ClientLimits, Quota, Rate
from .core.cors import CorsPolicy
from .core.health import MAX_COOLDOWN_S, HealthPolicy
from .core.ipnets import parse_networks
from .core.secret import Secret
from .core.snapshot import (
    CacheAwarePolicy,
    QueuePolicy,
    ResponseCachePolicy,
    RetryPolicy,
    Snapshot,
    group_by_model,
    hidden_names,
    regroup,
)
from .models import Backend, ConfigDocument
from .revision import BACKEND, DOCUMENT, NOTHING, changes_since, current_revision, is_whole
from .sqlread import InRead

log = logging.getLogger(__name__)


# What a BackendSpec is compiled from: read as named rows, not model instances
# (20,000 Backend instances cost more than the specs themselves).
_FIELDS = (
    "name", "url", "kind", "models", "served_model", "weight", "capacity", "priority",
    "api_key", "source", "connect_timeout", "read_timeout", "extra", "drained",
)


def _rows(qs: Any) -> Any:
    return qs.values_list(*_FIELDS, named=True).iterator(chunk_size=5000)


# The Backend rows a change names, in every web process's refresh (router/sqlread.py).
_NAMED = InRead(Backend, _FIELDS, "name")


def _rows_named(names: Collection[str]) -> Iterator[Any]:
    """The Backend rows of `names` (those that exist), as `_rows` gives them."""
    return _NAMED(names)


def _all_backends() -> Map[str, BackendSpec]:
    return Map({row.name: _spec(row) for row in _rows(Backend.objects.all())})


def _models(row: Any) -> tuple[str, ...]:
    names = list(row.models or ())
    extra = row.extra or {}
    if extra.get("discover_models"):
        names += [n for n in extra.get("discovered") or () if n not in names]
    return tuple(names)


def _spec(row: Any) -> BackendSpec:
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
        cli=_cli(row),
        responses=str((row.extra or {}).get("responses") or "auto"),
        quota=_quota(row),
        drained=bool(row.drained),
        role=str((row.extra or {}).get("role") or "both"),
        bootstrap_port=(row.extra or {}).get("bootstrap_port"),
    )


def _quota(row: Any) -> Quota | None:
    section = (row.extra or {}).get("quota")
    if not section:
        return None
    try:
        return quota(QuotaConfig.model_validate(section))
    except ValidationError as exc:  # a hand-edited row: that backend has no quota, the snapshot is fine
        log.error("backend %s: its quota section is invalid (%d errors); it has none", row.name, exc.error_count())
        return None


def _cli(row: Any) -> CliSpec | None:
    """The command of a cli backend, its ${VAR}s resolved (validated at config load)."""
    section = (row.extra or {}).get("command")
    if not section:
        return None
    try:
        cli = CliConfig.model_validate(interpolate(section, f"backend {row.name}.command"))
    except ValidationError as exc:  # a hand-edited row: that backend fails its requests, not the snapshot
        log.error("backend %s: its cli section is invalid (%d errors); it has no command", row.name, exc.error_count())
        return None
    return CliSpec(command=tuple(cli.command), prompt=cli.prompt, env=tuple(cli.env), cwd=cli.cwd, timeout=cli.timeout)


def document_digest() -> str:
    """The digest of the YAML the mirror holds ("" before the first sync)."""
    return ConfigDocument.objects.filter(pk=1).values_list("digest", flat=True).first() or ""


def routing_document() -> RouterFile:
    """The YAML as last applied (minus backends), `${ENV}` resolved here;
    the prompt files' texts, stored beside it, are never interpolated."""
    doc = ConfigDocument.objects.filter(pk=1).values_list("document", flat=True).first() or {}
    files = doc.get(global_prompts.PROMPT_FILES) or {}
    if files:
        doc = {k: v for k, v in doc.items() if k != global_prompts.PROMPT_FILES}
    cfg = RouterFile.model_validate(interpolate(doc))
    global_prompts.fill(cfg.global_prompts, files)
    return cfg


def _document_fields(cfg: RouterFile) -> dict[str, Any]:
    """The Snapshot fields compiled from the routing document itself."""
    h = cfg.health
    return dict(
        document=cfg,
        prompts=global_prompts.policy(cfg.global_prompts),
        fallback_chains={k: tuple(v) for k, v in cfg.fallback.fallback_chains.items()},
        strategy=cfg.selection_strategy,
        load_factor=cfg.prefix_hash.load_factor,
        session_header=cfg.prefix_hash.session_header,
        cache_aware=CacheAwarePolicy(
            block_chars=cfg.cache_aware.block_chars,
            min_match=cfg.cache_aware.min_match,
            max_entries=cfg.cache_aware.max_entries,
            max_prompt_chars=cfg.cache_aware.max_prompt_chars,
        ),
        retry=RetryPolicy(
            max_attempts=cfg.retry.max_attempts,
            backoff_s=cfg.retry.backoff,
            retry_on_status=frozenset(cfg.retry.retry_on_status),
        ),
        queue=QueuePolicy(max_wait_s=cfg.queue.max_wait, max_waiting=cfg.queue.max_waiting),
        health=HealthPolicy(
            failure_threshold=h.failure_threshold,
            cooldown_s=h.cooldown,
            # The breaker's backoff grows to 120 s, or stays at a longer cooldown.
            max_cooldown_s=max(MAX_COOLDOWN_S, h.cooldown),
            interval_s=h.interval,
            timeout_s=h.timeout,
            path=h.path,
            unhealthy_threshold=h.unhealthy_threshold,
            healthy_threshold=h.healthy_threshold,
            load_path=h.load_path,
            load_interval_s=h.load_interval,
            warmup_interval_s=h.warmup_interval,
            warmup_timeout_s=h.warmup_timeout,
        ),
        health_enabled=h.enabled,
        max_body_bytes=cfg.server.max_body_bytes,
        max_response_bytes=cfg.server.max_response_bytes,
        trusted_proxies=parse_networks(cfg.server.trusted_proxies),
        stream_usage=cfg.stream_usage,
        cors=CorsPolicy.build(**cfg.cors.model_dump()),
        response_cache=_response_cache(cfg),
        rate_limits=_client_limits(cfg),
        quota_scope=cfg.rate_limits.scope,
        disaggregation=dict(cfg.disaggregation),
        api_keys_mode=cfg.api_keys.mode,
        rate_limit_scope=cfg.api_keys.rate_limit_scope,
    )


def _rate(cfg: RateConfig) -> Rate:
    return Rate(per_s=cfg.rps, burst=cfg.burst if cfg.burst is not None else max(cfg.rps, 1.0))


def quota(cfg: QuotaConfig) -> Quota:
    """A backend's `quota:` as its buckets: rps (burst: rps unless said) and
    tpm (a minute's tokens saved up at most)."""
    rps = None if cfg.rps is None else Rate(per_s=cfg.rps, burst=cfg.burst or max(cfg.rps, 1.0))
    tpm = None if cfg.tpm is None else Rate(per_s=cfg.tpm / 60.0, burst=float(cfg.tpm))
    return Quota(rps=rps, tpm=tpm)


def _client_limits(cfg: RouterFile) -> ClientLimits | None:
    c = cfg.rate_limits
    if c.global_ is None and c.per_ip is None:
        return None
    return ClientLimits(
        scope=c.scope,
        total=None if c.global_ is None else _rate(c.global_),
        per_ip=None if c.per_ip is None else _rate(c.per_ip),
        bypass_networks=parse_networks(c.bypass.cidrs),
        bypass_keys=frozenset(c.bypass.keys),
    )


def _response_cache(cfg: RouterFile) -> ResponseCachePolicy | None:
    c = cfg.response_cache
    if not c.enabled:
        return None
    return ResponseCachePolicy(ttl_s=c.ttl, max_bytes=c.max_bytes, max_entry_bytes=c.max_entry_bytes,
                               shared=c.shared, scope=c.scope, deterministic_only=c.deterministic_only)


# How this process's snapshots were made (for /status): updated in place from
# the change log (of which "whole": with a topic re-read whole, the other
# parts kept), or compiled from scratch.
REFRESHES = {"updated": 0, "whole": 0, "compiled": 0}


def compile_snapshot(*, serving: bool = True) -> Snapshot:
    """The whole Snapshot from the mirror (a start, or a change the log cannot
    describe); `refresh_snapshot` is the usual path. `serving=False` (a
    process that serves no request): the requests-only parts are left at
    their defaults."""
    revision = current_revision()
    cfg = routing_document()
    backends = _all_backends()
    # The keyring, the Host ingress table…: compiled by the apps that own them.
    # A part may also override a field compiled from the document
    # (ROUTER mode forces api_keys_mode to "blocking").
    parts = {name: part.compile(cfg) for name, part in extensions.snapshot_parts(serving=serving).items()}
    by_model = group_by_model(backends)
    for name in parts.get("listed", ()):
        by_model.setdefault(name, ())
    fields: dict[str, Any] = dict(revision=revision, backends=backends, by_model=by_model, created=int(time.time()))
    fields.update(_document_fields(cfg))
    fields.update(parts)
    fields["hidden"] = hidden_names(by_model, fields.get("ingress"))
    return Snapshot(**fields)


def _known_topics() -> frozenset[str]:
    topics = {BACKEND, DOCUMENT, NOTHING}
    for part in extensions.snapshot_parts().values():
        topics.update(part.topics or ())
    return frozenset(topics)


def update_snapshot(
    prev: Snapshot, changes: Mapping[str, set[str]], revision: int, *, serving: bool = True
) -> Snapshot | None:
    """`prev` with the changes of the log applied in place: only the backends,
    model groups and parts they name are read and rebuilt; everything else is
    shared with `prev` by reference. None when a change is of a topic no one
    here knows (compile from scratch then)."""
    if not changes.keys() <= _known_topics():
        return None
    fields: dict[str, Any] = {"revision": revision}
    cfg = prev.document
    if DOCUMENT in changes:
        cfg = routing_document()
        fields.update(_document_fields(cfg))
    for name, part in extensions.snapshot_parts(serving=serving).items():
        value = getattr(prev, name)
        if part.topics is None or (DOCUMENT in changes and DOCUMENT in part.topics):
            value = part.compile(cfg)
        elif touched := part.topics & changes.keys():
            if part.update is None or any(is_whole(changes[t]) for t in touched):
                value = part.compile(cfg)
            else:
                value = part.update(value, {t: frozenset(changes[t]) for t in touched}, cfg)
        fields[name] = value
    names = changes.get(BACKEND, set())
    listed = fields.get("listed", prev.listed)
    if is_whole(names):  # every backend may have changed (a first pull): re-read and regroup them all
        backends = _all_backends()
        by_model = group_by_model(backends)
        for name in listed:
            by_model.setdefault(name, ())
        fields["backends"], fields["by_model"] = backends, by_model
    elif names or listed != prev.listed:
        old = {n: prev.backends.get(n) for n in names}
        new: dict[str, BackendSpec | None] = dict.fromkeys(names)
        new.update((row.name, _spec(row)) for row in _rows_named(names))
        # A persistent map: the next one shares all but the changed entries
        # with `prev`'s (copying a dict of 20,000 backends per change was a
        # third of a refresh, ~0.4 ms of the interpreter).
        base = prev.backends if isinstance(prev.backends, Map) else Map(prev.backends)
        with base.mutate() as changed:
            for n, spec in new.items():
                if spec is None:
                    changed.pop(n, None)
                else:
                    changed[n] = spec
            fields["backends"] = changed.finish()
        fields["by_model"] = regroup(
            prev.by_model, old, new, listed, frozenset(prev.listed).symmetric_difference(listed)
        )
    ingress = fields.get("ingress", prev.ingress)
    if "by_model" in fields or ingress is not prev.ingress:  # (a key change keeps both, and these)
        fields["hidden"] = hidden_names(fields.get("by_model", prev.by_model), ingress)
    return replace(prev, **fields)


def refresh_snapshot(prev: Snapshot, *, serving: bool = True) -> Snapshot:
    """The Snapshot of the current revision, from `prev`: `prev` itself when
    nothing changed, else updated in place from the change log, else (the log
    cannot say, or `prev` is not a compiled snapshot) compiled from scratch.
    `serving` (see compile_snapshot) must be what `prev` was made with."""
    revision = current_revision()
    if revision == prev.revision and prev.document is not None:
        return prev
    changes = None
    if prev.document is not None and revision > prev.revision:
        changes = changes_since(prev.revision, revision, whole=True)
    snap = update_snapshot(prev, changes, revision, serving=serving) if changes is not None else None
    if snap is not None and changes is not None:
        REFRESHES["updated"] += 1
        REFRESHES["whole"] += any(is_whole(names) for names in changes.values())
        return snap
    REFRESHES["compiled"] += 1
    return compile_snapshot(serving=serving)
