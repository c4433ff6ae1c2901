"""`/api/v1/keys`: the key lifecycle over HTTP.

Thin: every change goes through keys.services (the writers the dashboard,
the Django admin and the manage.py commands use), so it reaches every web
process's keyring through the same change-log touch and revision bump. The
plaintext of a created or rotated key is in that one answer and nowhere
else. Coordinator keys (AppProxy) are listed and read, never changed here.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Literal

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import Field, Query, Router, Schema

from keys import services, usage
from keys.models import ApiKey, KeySource
from keys.selectors import record_id

from . import audit
from .auth import actor_of
from .errors import Conflict, InvalidRequest, NotFound, ReadOnlyResource
from .paging import PageQuery, page

router = Router(tags=["keys"])


class KeyOut(Schema):
    id: int
    record_id: str = Field(description="operator:<id> or coordinator:<key_id>; the usage rows' key_ref")
    name: str
    owner: str
    source: Literal["operator", "coordinator"]
    hint: str = Field(description="the key's last characters, masked (sk-…abcd)")
    allowed_models: list[str] = Field(description="empty: every model")
    rate_limit: int | None = Field(description="requests per minute; null: unlimited")
    allowed_client_ips: list[str] = Field(description="IPs or CIDRs; empty: any address")
    expires_at: datetime | None
    enabled: bool
    revoked_at: datetime | None
    created_at: datetime
    state: Literal["active", "disabled", "expired", "revoked"]
    read_only: bool = Field(description="true for coordinator keys: the AppProxy coordinator owns them")


def key_out(key: ApiKey) -> KeyOut:
    if key.revoked_at is not None:
        state = "revoked"
    elif key.disabled_at is not None:
        state = "disabled"
    elif key.expires_at is not None and key.expires_at <= timezone.now():
        state = "expired"
    else:
        state = "active"
    return KeyOut(
        id=key.pk, record_id=record_id(key), name=key.name, owner=key.owner, source=key.source,
        hint=key.display_hint, allowed_models=list(key.allowed_models or ()), rate_limit=key.rate_limit,
        allowed_client_ips=list(key.allowed_client_ips or ()), expires_at=key.expires_at,
        enabled=key.disabled_at is None, revoked_at=key.revoked_at, created_at=key.created_at, state=state,
        read_only=key.source != KeySource.OPERATOR,
    )  # fmt: skip


def _state(key: ApiKey) -> dict:
    """What the audit digests: the key's settings, never its hash."""
    return key_out(key).model_dump(mode="json", exclude={"state"})


class KeyPage(Schema):
    data: list[KeyOut]
    total: int
    limit: int
    offset: int


class KeyCreate(Schema):
    model_config = {"extra": "forbid"}

    name: str = Field(min_length=1, max_length=200)
    owner: str = Field("", max_length=200)
    allowed_models: list[str] = Field(default_factory=list, description="empty: every model")
    rate_limit: int | None = Field(None, ge=1, description="requests per minute; null: unlimited")
    allowed_client_ips: list[str] = Field(default_factory=list, description="IPs or CIDRs; empty: any address")
    expires_at: datetime | None = None


class KeyPatch(Schema):
    model_config = {"extra": "forbid"}

    name: str | None = Field(None, min_length=1, max_length=200)
    owner: str | None = Field(None, max_length=200)
    allowed_models: list[str] | None = None
    rate_limit: int | None = Field(None, ge=1, description="null: unlimited")
    allowed_client_ips: list[str] | None = None
    expires_at: datetime | None = Field(None, description="null: never")
    enabled: bool | None = Field(None, description="false: refused (401) until enabled again; reversible")


class KeyRotate(Schema):
    grace_seconds: int = Field(
        0, ge=0, le=30 * 86400, description="0: the old secret stops at once; else it expires this much later"
    )


class KeyIssued(Schema):
    key: KeyOut
    secret: str = Field(description="the plaintext key: shown in this answer only, never again")


class KeyRotated(KeyIssued):
    previous: KeyOut


class KeyFilter(PageQuery):
    name: str | None = Field(None, description="exact name")
    owner: str | None = None
    source: Literal["operator", "coordinator"] | None = None
    include_revoked: bool = False


def _get(key_id: int) -> ApiKey:
    key = ApiKey.objects.filter(pk=key_id).first()
    if key is None:
        raise NotFound(f"No key with id {key_id}.", param="id")
    return key


def _operator(key_id: int) -> ApiKey:
    key = _get(key_id)
    if key.source != KeySource.OPERATOR:
        raise ReadOnlyResource("Coordinator keys are managed by the AppProxy coordinator; they are read-only here.")
    return key


def _refused(exc: ValueError | TypeError) -> InvalidRequest:
    text = str(exc)
    field = text.split(":", 1)[0] if ":" in text else None
    return InvalidRequest(text, param=field if field and field.isidentifier() else None)


@router.get("", response=KeyPage, summary="List keys (masked)")
def list_keys(request: HttpRequest, filters: Query[KeyFilter]) -> dict:
    qs = ApiKey.objects.order_by("source", "name", "-created_at", "pk")
    if filters.name is not None:
        qs = qs.filter(name=filters.name)
    if filters.owner is not None:
        qs = qs.filter(owner=filters.owner)
    if filters.source is not None:
        qs = qs.filter(source=filters.source)
    if not filters.include_revoked:
        qs = qs.filter(revoked_at__isnull=True)
    rows, facts = page(qs, filters)
    return {"data": [key_out(k) for k in rows], **facts}


@router.post("", response={201: KeyIssued}, summary="Create an operator key (its secret is in this answer only)")
def create_key(request: HttpRequest, body: KeyCreate) -> tuple[int, dict]:
    if body.expires_at is not None and _aware(body.expires_at) <= timezone.now():
        raise InvalidRequest("expires_at: is in the past", param="expires_at")
    try:
        with transaction.atomic():
            key, plaintext = services.key_create(**body.model_dump())
            audit.record(actor_of(request).name, "key.create", record_id(key), after=_state(key))
    except (ValueError, TypeError) as exc:
        raise _refused(exc) from exc
    return 201, {"key": key_out(key), "secret": plaintext}


@router.get("/{int:key_id}", response=KeyOut, summary="One key (masked)")
def get_key(request: HttpRequest, key_id: int) -> KeyOut:
    return key_out(_get(key_id))


@router.patch("/{int:key_id}", response=KeyOut, summary="Change a key's settings or enable / disable it")
def patch_key(request: HttpRequest, key_id: int, body: KeyPatch) -> KeyOut:
    key = _operator(key_id)
    if key.revoked_at is not None:
        raise Conflict("This key is revoked; create a new key instead.")
    changes = body.model_dump(exclude_unset=True)
    enabled = changes.pop("enabled", None)
    for name in ("name", "allowed_models", "allowed_client_ips"):
        if name in changes and changes[name] is None:
            raise InvalidRequest(f"{name}: cannot be null", param=name)
    before = _state(key)
    try:
        with transaction.atomic():
            if changes:
                services.key_update(key, **changes)
            if enabled is not None:
                services.key_set_enabled(key, enabled)
            key.refresh_from_db()
            audit.record(actor_of(request).name, "key.update", record_id(key), before=before, after=_state(key),
                         detail={"fields": sorted([*changes, *(["enabled"] if enabled is not None else [])])})
    except (ValueError, TypeError) as exc:
        raise _refused(exc) from exc
    return key_out(key)


@router.post("/{int:key_id}/rotate", response={201: KeyRotated}, summary="Issue a new secret for a key")
def rotate_key(request: HttpRequest, key_id: int, q: Query[KeyRotate]) -> tuple[int, dict]:
    key = _operator(key_id)
    grace = timedelta(seconds=q.grace_seconds) if q.grace_seconds else None
    before = _state(key)
    try:
        with transaction.atomic():
            new, plaintext = services.key_rotate(key, grace=grace)
            key.refresh_from_db()
            audit.record(actor_of(request).name, "key.rotate", record_id(key), before=before, after=_state(new),
                         detail={"new": record_id(new), "grace_seconds": int(grace.total_seconds()) if grace else 0})
    except ValueError as exc:
        raise Conflict(str(exc)) from exc
    return 201, {"key": key_out(new), "secret": plaintext, "previous": key_out(key)}


@router.delete("/{int:key_id}", response={204: None}, summary="Delete an operator key (it stops at once)")
def delete_key(request: HttpRequest, key_id: int) -> tuple[int, None]:
    key = _operator(key_id)
    with transaction.atomic():
        before = _state(key)
        services.key_delete(key)
        audit.record(actor_of(request).name, "key.delete", record_id(key), before=before)
    return 204, None


class UsageQuery(Schema):
    from_: datetime | None = Field(None, alias="from", description="UTC; default: 24 hours ago (floored to the hour)")
    to: datetime | None = Field(None, description="UTC, exclusive; default: now")
    granularity: Literal["hour", "day", "total"] = "hour"
    format: Literal["json", "csv"] | None = Field(None, description="csv: also chosen by Accept: text/csv")


class UsageRow(Schema):
    hour: datetime | None = Field(description="the hour or day it starts; null in a total")
    requests: int
    errors: int
    prompt_tokens: int
    completion_tokens: int
    last_used_at: datetime | None


class UsageOut(Schema):
    key: str = Field(description="the key's record id")
    granularity: str
    start: datetime
    end: datetime
    rows: list[UsageRow]


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@router.get("/{int:key_id}/usage", response=UsageOut, summary="A key's usage (JSON, or CSV by Accept or ?format)")
def key_usage(request: HttpRequest, key_id: int, q: Query[UsageQuery]) -> UsageOut | HttpResponse:
    key = _get(key_id)
    end = _aware(q.to) if q.to else timezone.now()
    start = usage.window_start(since=_aware(q.from_)) if q.from_ else usage.window_start(days=1, now=end)
    if start >= end:
        raise InvalidRequest("from: must be before to", param="from")
    if end - start > timedelta(days=400):
        raise InvalidRequest("from: a window of at most 400 days", param="from")
    ref = record_id(key)
    hourly = [r for r in usage.hourly(start, ref) if r.hour is not None and r.hour < end]
    rows = usage.group(hourly, {"total": "key"}.get(q.granularity, q.granularity))
    as_csv = q.format == "csv" or (q.format is None and "text/csv" in request.headers.get("Accept", ""))
    if as_csv:
        buf = io.StringIO()
        writer = csv.writer(buf)
        for line in usage.csv_rows(rows):
            writer.writerow(line)
        answer = HttpResponse(buf.getvalue(), content_type="text/csv; charset=utf-8")
        answer["Content-Disposition"] = f'attachment; filename="usage-{key.pk}.csv"'
        return answer
    return UsageOut(
        key=ref, granularity=q.granularity, start=start, end=end,
        rows=[UsageRow(hour=r.hour, requests=r.requests, errors=r.errors, prompt_tokens=r.prompt_tokens,
                       completion_tokens=r.completion_tokens, last_used_at=r.last_used_at) for r in rows],
    )  # fmt: skip
