"""Coordinator wire models (reference §§1.3-1.4, 2): what we send and accept.

Invariants:
- Coordinator payloads ignore unknown fields (``extra="ignore"``), so a
  coordinator that adds a field never breaks the worker; fields that were
  removed upstream (RouteInfo ``health_status`` …) are simply dropped.
- RouteInfo accepts kebab-case and snake_case input; everything we emit is
  snake_case (``model_dump(mode="json")``).
- A ``Circuit`` remembers the exact mapping it was parsed from (``raw``): the
  ack of a created event must echo the *complete* circuit objects, and the
  coordinator re-parses every field, so we echo what we received rather than
  a re-serialisation that could differ (or drop fields we do not model).
- The refined BEP-1053 fields are optional and tolerant: a circuit's
  ``replica_groups`` (``[{id, traffic_weight, lifecycle}]``) keeps only the
  entries with an id (an unusable entry or a non-list is dropped, never the
  circuit), and a route's ``replica_group_id`` is a string or None. Only the
  ROUTER plan's ``hierarchical`` weighting reads them.
- No Django, no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

__all__ = [
    "Circuit",
    "ReplicaGroup",
    "RouteInfo",
    "SlotInfo",
    "WorkerInfo",
    "WorkerRegistration",
    "parse_circuits",
]


def _alias(name: str) -> AliasChoices:
    return AliasChoices(name.replace("_", "-"), name)


class RouteInfo(BaseModel):
    """One replica of a circuit (reference §2.2)."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    route_id: UUID | None = Field(default=None, validation_alias=_alias("route_id"))
    session_id: UUID = Field(validation_alias=_alias("session_id"))
    session_name: str | None = Field(default=None, validation_alias=_alias("session_name"))
    # Required key upstream; null means "localhost".
    kernel_host: str | None = Field(default=None, validation_alias=_alias("kernel_host"))
    kernel_port: int = Field(ge=1, le=65535, validation_alias=_alias("kernel_port"))
    protocol: str = "http"
    traffic_ratio: float = 1.0
    # Refined BEP-1053: the replica group this route belongs to (None: the
    # circuit's implicit group).
    replica_group_id: str | None = Field(default=None, validation_alias=_alias("replica_group_id"))

    @field_validator("replica_group_id", mode="before")
    @classmethod
    def _group_id(cls, v: Any) -> Any:
        if v is None or isinstance(v, bool) or not isinstance(v, (str, int, UUID)):
            return None
        return str(v).strip().lower() or None

    @property
    def host(self) -> str:
        return self.kernel_host or "localhost"

    @property
    def key(self) -> str:
        """The route's identity inside its circuit: route_id, else session_id."""
        return str(self.route_id if self.route_id is not None else self.session_id)


class ReplicaGroup(BaseModel):
    """One replica group of a circuit (refined BEP-1053): its routes share
    ``traffic_weight`` of the endpoint's traffic (default 100, the weight of
    the implicit group). ``lifecycle`` is kept as received; no rule reads it."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    id: str = Field(min_length=1)
    traffic_weight: Any = 100.0  # sanitised by the plan (a NaN, inf or negative is 0)
    lifecycle: str | None = None

    @field_validator("id", mode="before")
    @classmethod
    def _id(cls, v: Any) -> Any:
        return str(v).strip().lower() if isinstance(v, (str, int, UUID)) and not isinstance(v, bool) else v

    @field_validator("traffic_weight", mode="before")
    @classmethod
    def _weight(cls, v: Any) -> Any:
        return 100.0 if v is None else v

    @field_validator("lifecycle", mode="before")
    @classmethod
    def _lifecycle(cls, v: Any) -> Any:
        return None if v is None else str(v)


_NO_GROUP = {"replica_group_id"}


def _groups(value: Any) -> tuple[ReplicaGroup, ...]:
    """The usable entries of a ``replica_groups`` value, first of each id."""
    if not isinstance(value, (list, tuple)):
        return ()
    out: dict[str, ReplicaGroup] = {}
    for item in value:
        try:
            group = ReplicaGroup.model_validate(item)
        except ValidationError:
            continue
        out.setdefault(group.id, group)
    return tuple(out.values())


def _copy_tree(data: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of decoded JSON (dicts, lists, scalars), without
    `copy.deepcopy`'s memo and dispatch: a first pull copies 5,000 circuits
    (7 MB) and deepcopy was an eighth of its CPU. Anything that is not a
    JSON container or scalar still goes through deepcopy."""
    return {k: _copy_value(v) for k, v in data.items()}


_SCALARS = (str, int, float, bool, type(None))


def _copy_value(value: Any) -> Any:
    if isinstance(value, _SCALARS):
        return value
    if type(value) is dict:
        return {k: _copy_value(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy_value(v) for v in value]
    return copy.deepcopy(value)


class Circuit(BaseModel):
    """SerializableCircuit (reference §2.1), lenient on input.

    Only ``id`` is required here: a worker should not refuse a circuit because
    an upstream field it never reads is missing. ``raw`` is the original
    mapping (deep-copied), used verbatim in acks.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: UUID
    app: str = ""
    protocol: str = "http"
    worker: UUID | None = None
    app_mode: str = "inference"
    frontend_mode: str = "wildcard"
    envs: dict[str, Any] = Field(default_factory=dict)
    arguments: str | None = None
    open_to_public: bool = False
    allowed_client_ips: str | None = None
    port: int | None = None
    subdomain: str | None = None
    user_id: UUID | None = None
    endpoint_id: UUID | None = None
    runtime_variant: str | None = None
    route_info: tuple[RouteInfo, ...] = ()
    replica_groups: tuple[ReplicaGroup, ...] = Field(default=(), validation_alias=_alias("replica_groups"))
    session_ids: tuple[UUID, ...] = ()
    created_at: datetime | None = None
    updated_at: datetime | None = None

    _raw: dict[str, Any] | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_raw(cls, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        obj = handler(data)
        if isinstance(data, Mapping) and isinstance(obj, Circuit):
            # A caller that hands over what it decoded (OWNED) gives the
            # mapping away: kept as it is, not copied (a first pull's 5,000
            # circuits, ~0.4 s of CPU).
            obj._raw = data if info.context is OWNED and type(data) is dict else _copy_tree(data)
        return obj

    @property
    def raw(self) -> dict[str, Any]:
        """The complete object as received (a copy), for echoing in an ack."""
        if self._raw is not None:
            return copy.deepcopy(self._raw)
        return self.model_dump(mode="json")

    def raw_to_store(self) -> dict[str, Any]:
        """The object as received, not copied: for a caller that only
        serializes it (a row's write), never keeps or changes it."""
        return self._raw if self._raw is not None else self.model_dump(mode="json")

    def same_raw(self, raw: Any) -> bool:
        """Whether `raw` is the object this circuit was parsed from (no copy)."""
        return (self._raw if self._raw is not None else self.model_dump(mode="json")) == raw

    @field_validator("replica_groups", mode="before")
    @classmethod
    def _replica_groups(cls, v: Any) -> Any:
        return _groups(v)

    @property
    def is_inference(self) -> bool:
        return self.app_mode == "inference"

    @property
    def model_key(self) -> str:
        """Key of the discovered-model cache: endpoint_id, else the circuit id."""
        return str(self.endpoint_id if self.endpoint_id is not None else self.id)

    def with_routes(self, routes: Iterable[RouteInfo]) -> Circuit:
        """A copy whose route set is replaced (route_updated semantics)."""
        new_routes = tuple(routes)
        out = self.model_copy(update={"route_info": new_routes})
        raw = self.raw
        # A route without a group keeps the legacy shape (no null field).
        raw["route_info"] = [
            r.model_dump(mode="json", exclude=_NO_GROUP if r.replica_group_id is None else None) for r in new_routes
        ]
        out._raw = raw
        return out


# The validation context of a caller that gives its decoded items away: it
# never reads or changes them again, so a circuit keeps its item as its raw.
OWNED: dict[str, Any] = {"owned": True}


def parse_circuits(items: Iterable[Any], *, owned: bool = False) -> tuple[list[Circuit], list[str]]:
    """Validate each element on its own: one bad circuit never hides the rest.

    Returns (circuits, errors) where errors are short human-readable strings.
    `owned`: the caller decoded `items` for this parse and gives them away
    (never reads or changes them after); each circuit then keeps its item
    as its raw mapping instead of a copy.
    """
    good: list[Circuit] = []
    errors: list[str] = []
    context = OWNED if owned else None
    for index, item in enumerate(items):
        try:
            good.append(Circuit.model_validate(item, context=context))
        except ValidationError as exc:
            ident = item.get("id") if isinstance(item, Mapping) else None
            errors.append(f"circuit[{index}] id={ident!r}: {exc.error_count()} validation error(s)")
    return good, errors


class AppFilter(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    key: str
    value: str


class WorkerRegistration(BaseModel):
    """The ``PUT /api/worker`` body (reference §1.3), snake_case, no aliases."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    authority: str = Field(min_length=1)
    frontend_mode: Literal["wildcard", "port"] = "wildcard"
    protocol: Literal["http", "grpc", "h2", "tcp", "preopen", "vnc", "rdp"] = "http"
    hostname: str = Field(min_length=1)
    tls_listen: bool = False
    tls_advertised: bool = False
    api_port: int = Field(ge=1, le=65535)
    port_range: tuple[int, int] | None = None
    wildcard_domain: str | None = None
    wildcard_traffic_port: int | None = Field(default=None, ge=1, le=65535)
    filtered_apps_only: bool = False
    traefik_last_used_marker_path: str | None = None
    accepted_traffics: tuple[Literal["interactive", "inference"], ...] = ("inference",)
    app_filters: tuple[AppFilter, ...] = ()

    @model_validator(mode="after")
    def _check_mode(self) -> WorkerRegistration:
        if self.frontend_mode == "wildcard":
            domain = self.wildcard_domain or ""
            if len(domain) < 2 or not domain.startswith("."):
                raise ValueError(
                    "wildcard_domain is required for frontend_mode 'wildcard' and "
                    "must start with a dot, e.g. '.models.example.com'"
                )
        elif self.port_range is None:
            raise ValueError("port_range is required for frontend_mode 'port'")
        if "inference" not in self.accepted_traffics:
            raise ValueError("accepted_traffics must include 'inference'")
        return self

    @classmethod
    def wildcard(
        cls,
        *,
        authority: str,
        hostname: str,
        api_port: int,
        wildcard_domain: str,
        wildcard_traffic_port: int | None = None,
        tls_listen: bool = False,
        tls_advertised: bool = False,
    ) -> WorkerRegistration:
        """A wildcard inference worker. A missing leading dot is added."""
        domain = wildcard_domain
        if domain and not domain.startswith("."):
            domain = "." + domain
        return cls(
            authority=authority,
            hostname=hostname,
            api_port=api_port,
            wildcard_domain=domain,
            wildcard_traffic_port=wildcard_traffic_port,
            tls_listen=tls_listen,
            tls_advertised=tls_advertised,
        )

    @classmethod
    def from_settings(cls, settings: Any, *, api_port: int | None = None) -> WorkerRegistration:
        """Build from the ``appproxy`` config section (object or mapping).

        Reads ``authority``, ``hostname``, ``wildcard_domain``,
        ``wildcard_traffic_port``, ``tls_listen``, ``tls_advertised`` and
        ``api_port`` (falling back to ``wildcard_traffic_port``, then 80).
        """

        def get(name: str, default: Any = None) -> Any:
            if isinstance(settings, Mapping):
                return settings.get(name, default)
            return getattr(settings, name, default)

        traffic_port = get("wildcard_traffic_port")
        port = api_port or get("api_port") or traffic_port or 80
        return cls.wildcard(
            authority=get("authority"),
            hostname=get("hostname"),
            api_port=int(port),
            wildcard_domain=get("wildcard_domain") or "",
            wildcard_traffic_port=traffic_port,
            tls_listen=bool(get("tls_listen", False)),
            tls_advertised=bool(get("tls_advertised", False)),
        )

    def to_body(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class SlotInfo(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    frontend_mode: str | None = None
    in_use: bool = False
    port: int | None = None
    subdomain: str | None = None
    circuit_id: UUID | None = None


class WorkerInfo(BaseModel):
    """WorkerResponseModel (reference §1.4); only ``id`` is required."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: UUID
    authority: str | None = None
    frontend_mode: str | None = None
    protocol: str | None = None
    hostname: str | None = None
    api_port: int | None = None
    wildcard_domain: str | None = None
    wildcard_traffic_port: int | None = None
    accepted_traffics: tuple[str, ...] = ()
    available_slots: int | None = None
    occupied_slots: int | None = None
    # A count (stock coordinators) or, for a ROUTER worker, the live node
    # sessions [{node_id, last_seen}] (BEP-1053).
    nodes: int | list[Any] | None = None
    slots: tuple[SlotInfo, ...] = ()
    created_at: datetime | None = None
    updated_at: datetime | None = None
