"""Request bodies of the worker and manager APIs, and JSON in and out.

Request models ignore unknown fields, like the real coordinator's. A body
that is not JSON, or does not validate, is a 400 ``invalid-api-params`` whose
``data.errors`` lists pydantic's errors without URLs, context or input.
Deployment ids are also accepted under their old name ``endpoint_id``.
ROUTER bodies (BEP-1053): registration adds ``traffic_port`` and ``node_id``;
publications and keys are validated here (ratio ≥ 0 and finite, token_hash
64 lowercase hex, client IPs as IPs or CIDRs).
"""

from __future__ import annotations

import ipaddress
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar
from uuid import UUID

import orjson
from aiohttp import web
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import invalid

Protocol = Literal["http", "grpc", "h2", "tcp", "preopen", "vnc", "rdp"]
DeploymentId = Annotated[UUID, Field(validation_alias=AliasChoices("deployment_id", "endpoint_id"))]


class Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class AppFilter(Model):
    key: str
    value: str


class WorkerRequest(Model):
    authority: str
    frontend_mode: Literal["wildcard", "port", "router"]
    protocol: Protocol
    hostname: str
    tls_listen: bool
    tls_advertised: bool
    api_port: int
    port_range: tuple[int, int] | None = None
    wildcard_domain: str | None = None
    wildcard_traffic_port: int | None = None
    filtered_apps_only: bool
    traefik_last_used_marker_path: str | None = None
    accepted_traffics: list[Literal["interactive", "inference"]]
    app_filters: list[AppFilter] = Field(default_factory=list)
    # ROUTER only (BEP-1053): the public data-plane port and the node identity.
    traffic_port: int | None = Field(default=None, ge=0, le=65535)
    node_id: str | None = Field(default=None, min_length=1, max_length=128)


class SessionTags(Model):
    id: UUID | None = None
    user_uuid: UUID
    project_id: UUID = Field(validation_alias=AliasChoices("project_id", "group_id"))
    access_key: str | None = None
    domain_name: str


class EndpointTags(Model):
    id: UUID
    runtime_variant: str | None = None
    existing_url: str | None = None


class Tags(Model):
    session: SessionTags
    endpoint: EndpointTags


class CreateItem(Model):
    deployment_id: DeploymentId
    version: str = "v2"
    service_name: str
    tags: Tags
    open_to_public: bool = False
    health_check: dict[str, Any] | None = None


class CreateSingle(Model):
    version: str = "v2"
    service_name: str
    tags: Tags
    open_to_public: bool = False
    port: int | None = None
    subdomain: str | None = None
    health_check: dict[str, Any] | None = None


class BulkCreate(Model):
    endpoints: list[CreateItem]


class DeleteItem(Model):
    deployment_id: DeploymentId


class BulkDelete(Model):
    endpoints: list[DeleteItem]


class RouteEntry(Model):
    session_id: UUID
    route_id: UUID
    kernel_host: str
    kernel_port: int
    # The refined BEP-1053 shape: a route's group and its share within it.
    replica_group_id: str | None = None
    traffic_ratio: float = 1.0


class ReplicaGroupEntry(Model):
    id: str
    traffic_weight: float = 100.0
    lifecycle: str | None = None


class RoutesItem(Model):
    deployment_id: DeploymentId
    routes: list[RouteEntry]
    # Given: the circuit carries these groups (the refined shape); absent:
    # the circuit keeps the groups it has (none: the seed's shape).
    replica_groups: list[ReplicaGroupEntry] | None = None


class BulkRoutes(Model):
    endpoints: list[RoutesItem]


class UnregisterItem(Model):
    deployment_id: DeploymentId
    route_ids: list[UUID]


class BulkUnregister(Model):
    endpoints: list[UnregisterItem]


class HealthCheck(Model):
    health_check: dict[str, Any] | None = None


class TokenRequest(Model):
    user_uuid: UUID
    exp: datetime


# -- ROUTER (BEP-1053) -----------------------------------------------------------


class NodeBody(Model):
    node_id: str | None = None


class MappingBody(Model):
    endpoint_id: UUID
    ratio: float = Field(default=1.0, ge=0, allow_inf_nan=False)


class PublicationBody(Model):
    aliases: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    mappings: list[MappingBody] = Field(default_factory=list)
    control_mode: Literal["manual", "strategy_managed", "strategy-managed"] = "manual"


class KeyBody(Model):
    token_hash: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    allowed_models: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    expires_at: datetime | None = None
    rate_limit: int | None = Field(default=None, ge=1)
    allowed_client_ips: list[str] | None = None
    display_hint: str | None = Field(default=None, max_length=64)

    @field_validator("allowed_client_ips")
    @classmethod
    def _networks(cls, value: list[str] | None) -> list[str] | None:
        for item in value or []:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError("each entry must be an IP address or CIDR") from None
        return value


M = TypeVar("M", bound=BaseModel)


async def load_json(request: web.Request) -> Any:
    """The body as JSON (an empty body is ``{}``); else 400 Malformed body."""
    raw = await request.read()
    try:
        return orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError:
        raise invalid("Malformed body") from None


def validate(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        raise invalid("Input validation error", errors) from exc


async def parse(request: web.Request, model: type[M]) -> M:
    return validate(model, await load_json(request))


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
