"""Request bodies of the worker and manager APIs, and JSON in and out.

Request models ignore unknown fields, like the real coordinator's. A body
that is not JSON, or does not validate, is a 400 ``invalid-api-params`` whose
``data.errors`` lists pydantic's errors without URLs, context or input.
Deployment ids are also accepted under their old name ``endpoint_id``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar
from uuid import UUID

import orjson
from aiohttp import web
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

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
    frontend_mode: Literal["wildcard", "port"]
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


class RoutesItem(Model):
    deployment_id: DeploymentId
    routes: list[RouteEntry]


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


M = TypeVar("M", bound=BaseModel)


async def parse(request: web.Request, model: type[M]) -> M:
    raw = await request.read()
    try:
        data = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError:
        raise invalid("Malformed body") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        raise invalid("Input validation error", errors) from exc


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
