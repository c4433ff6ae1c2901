"""Validation of the settings a key carries (shared by every key writer).

ValueError for a bad value, TypeError for a wrong type; messages name the
field and say what is expected. Nothing here touches the database.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone

from router.core.ipnets import parse_networks

EDITABLE = (
    "name",
    "owner",
    "allowed_models",
    "expires_at",
    "rate_limit",
    "allowed_client_ips",
)


def clean_names(value: Iterable[str] | str | None, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split(",")
    out: list[str] = []
    for item in value:
        if not isinstance(item, str):
            raise TypeError(f"{what}: expected text entries, got {item!r}")
        item = item.strip()
        if item and item not in out:
            out.append(item)
    return out


def clean_allowed_models(value: Iterable[str] | str | None) -> list[str]:
    return clean_names(value, "allowed_models")


def clean_client_ips(value: Iterable[str] | str | None) -> list[str]:
    """IPs/CIDRs (v4/v6) as the operator wrote them; ValueError on a bad one."""
    entries = clean_names(value, "allowed_client_ips")
    try:
        parse_networks(entries, strict=True)
    except ValueError as exc:
        raise ValueError(
            f"allowed_client_ips: {exc} (use an address like 10.0.0.7 or 2001:db8::1, "
            "or a CIDR like 10.0.0.0/8)"
        ) from None
    return entries


def clean_rate_limit(value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"rate_limit: expected a whole number of requests per minute ≥ 1, got {value!r}"
        )
    return value


def clean_expires_at(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise TypeError(f"expires_at: expected a datetime, got {type(value).__name__}")
    if timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    return value


def clean_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    cleaned: dict[str, Any] = {}
    for name, value in fields.items():
        if name == "name":
            value = (value or "").strip()
            if not value:
                raise ValueError("name: a key needs a name")
            if len(value) > 200:
                raise ValueError("name: at most 200 characters")
        elif name == "owner":
            value = (value or "").strip()[:200]
        elif name == "allowed_models":
            value = clean_allowed_models(value)
        elif name == "allowed_client_ips":
            value = clean_client_ips(value)
        elif name == "rate_limit":
            value = clean_rate_limit(value)
        elif name == "expires_at":
            value = clean_expires_at(value)
        else:
            raise ValueError(f"{name}: not an editable key field")
        cleaned[name] = value
    return cleaned
