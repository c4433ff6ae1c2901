"""Shared parsing/rendering for the key commands (masked output only)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.core.management.base import CommandError

from keys.models import ApiKey


def split_list(value: str | None) -> list[str]:
    return [p.strip() for p in (value or "").split(",") if p.strip()]


def parse_expiry(value: str | None) -> datetime | None:
    if not value:
        return None
    text = value.strip()
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(
            f"--expires {value!r} is not an ISO 8601 date/time; "
            "use e.g. 2026-12-31 or 2026-12-31T23:59:59Z"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when


def summary(key: ApiKey) -> list[str]:
    return [
        f"name:       {key.name}",
        f"owner:      {key.owner or '-'}",
        f"source:     {key.source}" + (f" ({key.key_id})" if key.key_id else ""),
        f"hint:       {key.display_hint or '-'}",
        f"models:     {', '.join(key.allowed_models) if key.allowed_models else 'all'}",
        f"rate limit: {f'{key.rate_limit}/min' if key.rate_limit else 'unlimited'}",
        "client IPs: "
        + (", ".join(key.allowed_client_ips) if key.allowed_client_ips else "any"),
        f"expires:    {key.expires_at.isoformat() if key.expires_at else 'never'}",
    ]
