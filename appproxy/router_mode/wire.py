"""ROUTER-mode wire models (seed §9.10, reference/router-mode.md §1.1-1.3).

What the coordinator sends a ROUTER worker besides circuits: model
publications and API-key records, in the ``router-config`` snapshot and in
the router events; and what the worker sends: its registration body.

Invariants:
- Input is tolerant exactly as the seed §6.2 asks: snake_case names and
  their kebab-case aliases; ``models`` may be called ``publications``,
  ``api_keys`` may be ``keys`` or ``api-keys`` (``models`` wins when both are
  present); a publication's name may come as ``model``, ``model_name`` or
  ``name``; unknown fields are ignored.
- ``revision`` is opaque: a JSON string or number, kept as a string and only
  compared for equality and echoed.
- One bad entry never hides the rest: ``parse_snapshot`` validates every
  publication and key on its own and reports the ones it skipped.
- Ratios stay as received (NaN, inf, negative included) — sanitising is the
  plan's job (plan.sanitize); a non-numeric ratio rejects its entry.
- A key record carries ``token_hash`` (64 hex digits, lower-cased here);
  its repr never shows it. No plaintext token is ever accepted.
- Output is snake_case. No Django, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = [
    "EndpointMapping",
    "KeyRecordWire",
    "Publication",
    "RouterSnapshot",
    "parse_expiry",
    "parse_key",
    "parse_publication",
    "parse_snapshot",
    "revision_text",
    "router_registration",
]

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _alias(name: str, *more: str) -> AliasChoices:
    names = [name, name.replace("_", "-")]
    for extra in more:
        names += [extra, extra.replace("_", "-")]
    return AliasChoices(*dict.fromkeys(names))


class EndpointMapping(BaseModel):
    """One ``{endpoint_id, ratio}`` of a publication (``ratio`` defaults to 1.0)."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    endpoint_id: str = Field(min_length=1, validation_alias=_alias("endpoint_id"))
    ratio: float = 1.0

    @field_validator("endpoint_id", mode="before")
    @classmethod
    def _endpoint(cls, v: Any) -> Any:
        return str(v).strip().lower() if v is not None and not isinstance(v, (dict, list, bool)) else v

    @field_validator("ratio", mode="before")
    @classmethod
    def _ratio(cls, v: Any) -> Any:
        if v is None:
            return 1.0
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError("ratio must be a number")
        return v


class Publication(BaseModel):
    """One published model: a primary name, aliases and endpoint mappings."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    model: str = Field(min_length=1, max_length=300, validation_alias=_alias("model", "model_name", "name"))
    aliases: tuple[str, ...] = ()
    mappings: tuple[EndpointMapping, ...] = ()
    control_mode: str = Field(default="manual", validation_alias=_alias("control_mode"))

    @field_validator("aliases", mode="before")
    @classmethod
    def _aliases(cls, v: Any) -> Any:
        if v is None:
            return ()
        if not isinstance(v, (list, tuple)) or not all(isinstance(a, str) and a for a in v):
            raise ValueError("aliases must be a list of names")
        return tuple(dict.fromkeys(a for a in v))

    @field_validator("mappings", mode="before")
    @classmethod
    def _mappings(cls, v: Any) -> Any:
        return () if v is None else v

    @field_validator("control_mode", mode="before")
    @classmethod
    def _control(cls, v: Any) -> Any:
        return "manual" if v is None else str(v)

    @property
    def names(self) -> tuple[str, ...]:
        """The primary name, then the aliases (deduplicated)."""
        return tuple(dict.fromkeys((self.model, *self.aliases)))

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "aliases": list(self.aliases),
            "mappings": [{"endpoint_id": m.endpoint_id, "ratio": m.ratio} for m in self.mappings],
            "control_mode": self.control_mode,
        }


def parse_expiry(value: Any) -> tuple[datetime | None, bool]:
    """(expires_at in UTC or None, ok). RFC 3339 with ``Z``/offset, with or
    without fractions; a naive value is UTC; ``None``/absent never expires;
    anything else is not ok (the key then fails closed)."""
    if value is None or value == "":
        return None, True
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None, False
    if isinstance(value, (int, float)):
        try:
            return datetime.fromtimestamp(float(value), UTC), True
        except (OverflowError, OSError, ValueError):
            return None, False
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None, False
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC), True


class KeyRecordWire(BaseModel):
    """One coordinator API key as the snapshot carries it (hash only)."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    key_id: str = Field(min_length=1, max_length=200, validation_alias=_alias("key_id", "id"))
    token_hash: str = Field(repr=False, validation_alias=_alias("token_hash"))
    allowed_models: tuple[str, ...] = Field(default=(), validation_alias=_alias("allowed_models"))
    expires_at: Any = Field(default=None, validation_alias=_alias("expires_at"))
    rate_limit: int | None = Field(default=None, validation_alias=_alias("rate_limit"))
    allowed_client_ips: tuple[str, ...] = Field(default=(), validation_alias=_alias("allowed_client_ips"))
    display_hint: str = Field(default="", max_length=32, validation_alias=_alias("display_hint"))

    @field_validator("key_id", mode="before")
    @classmethod
    def _key_id(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("token_hash", mode="before")
    @classmethod
    def _hash(cls, v: Any) -> Any:
        if not isinstance(v, str) or not _HEX64.match(v.strip().lower()):
            raise ValueError("token_hash must be 64 hex digits (the SHA-256 of the key)")
        return v.strip().lower()

    @field_validator("allowed_models", "allowed_client_ips", mode="before")
    @classmethod
    def _names(cls, v: Any) -> Any:
        if v is None:
            return ()
        if isinstance(v, str):
            return tuple(p.strip() for p in v.split(",") if p.strip())
        return v

    @field_validator("rate_limit", mode="before")
    @classmethod
    def _rate(cls, v: Any) -> Any:
        if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0):
            return None
        return v

    @field_validator("display_hint", mode="before")
    @classmethod
    def _hint(cls, v: Any) -> Any:
        return "" if v is None else str(v)[:32]

    def expiry(self) -> tuple[datetime | None, bool]:
        return parse_expiry(self.expires_at)

    def __repr__(self) -> str:
        return f"<KeyRecordWire {self.key_id!r}>"

    __str__ = __repr__


def revision_text(value: Any) -> str | None:
    """The opaque revision as a string (a number keeps its JSON spelling)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (int, float, str)):
        return str(value)
    return None


def _first(raw: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        if name in raw:
            return raw[name]
    return None


def parse_publication(item: Any) -> Publication:
    """Raises ValueError (with a short reason) for an unusable entry."""
    try:
        return Publication.model_validate(item)
    except ValidationError as exc:
        raise ValueError(f"{exc.error_count()} validation error(s)") from None


def parse_key(item: Any) -> KeyRecordWire:
    """Raises ValueError (never echoing the hash) for an unusable entry."""
    if isinstance(item, Mapping) and ("token" in item) and not any(k in item for k in ("token_hash", "token-hash")):
        raise ValueError("carries a plaintext token, not a token_hash; refused")
    try:
        return KeyRecordWire.model_validate(item)
    except ValidationError as exc:
        fields = sorted({str(e["loc"][0]) for e in exc.errors(include_input=False) if e["loc"]})
        raise ValueError(f"invalid {', '.join(fields) or 'entry'}") from None


@dataclass(frozen=True, slots=True)
class RouterSnapshot:
    revision: str | None
    publications: tuple[Publication, ...] = ()
    keys: tuple[KeyRecordWire, ...] = ()
    errors: tuple[str, ...] = ()  # entries skipped, for the log
    skipped_keys: frozenset[str] = field(default_factory=frozenset)  # key ids that did not parse
    skipped_models: frozenset[str] = field(default_factory=frozenset)


def parse_snapshot(raw: Any) -> RouterSnapshot:
    """The ``router-config`` 200 body. Raises ValueError when it is not an object."""
    if not isinstance(raw, Mapping):
        raise ValueError("router-config is not a JSON object")
    models = _first(raw, "models", "publications")
    keys = _first(raw, "api_keys", "api-keys", "keys")
    if models is not None and not isinstance(models, list):
        raise ValueError("router-config models is not a list")
    if keys is not None and not isinstance(keys, list):
        raise ValueError("router-config api_keys is not a list")
    errors: list[str] = []
    pubs: dict[str, Publication] = {}
    skipped_models: set[str] = set()
    for index, item in enumerate(models or ()):
        try:
            pub = parse_publication(item)
        except ValueError as exc:
            name = _first(item, "model", "model_name", "name") if isinstance(item, Mapping) else None
            if isinstance(name, str):
                skipped_models.add(name)
            errors.append(f"models[{index}] ({name!r}): {exc}")
            continue
        pubs[pub.model] = pub
    records: dict[str, KeyRecordWire] = {}
    skipped_keys: set[str] = set()
    for index, item in enumerate(keys or ()):
        try:
            key = parse_key(item)
        except ValueError as exc:
            ident = _first(item, "key_id", "key-id", "id") if isinstance(item, Mapping) else None
            if ident is not None:
                skipped_keys.add(str(ident))
            errors.append(f"api_keys[{index}] (key_id {ident!r}): {exc}")
            continue
        records[key.key_id] = key
    return RouterSnapshot(
        revision=revision_text(raw.get("revision")),
        publications=tuple(pubs.values()),
        keys=tuple(records.values()),
        errors=tuple(errors),
        skipped_keys=frozenset(skipped_keys),
        skipped_models=frozenset(skipped_models),
    )


def router_registration(
    *,
    authority: str,
    hostname: str,
    api_port: int,
    traffic_port: int | None,
    node_id: str,
    tls_listen: bool = False,
    tls_advertised: bool = False,
) -> dict[str, Any]:
    """The ROUTER ``PUT /api/worker`` body of seed §9.10 (slot fields explicit nulls)."""
    return {
        "authority": authority,
        "frontend_mode": "router",
        "protocol": "http",
        "hostname": hostname,
        "tls_listen": tls_listen,
        "tls_advertised": tls_advertised,
        "api_port": api_port,
        "traffic_port": traffic_port or api_port,
        "node_id": node_id,
        "accepted_traffics": ["inference"],
        "filtered_apps_only": False,
        "app_filters": [],
        "port_range": None,
        "wildcard_domain": None,
        "wildcard_traffic_port": None,
        "traefik_last_used_marker_path": None,
    }
