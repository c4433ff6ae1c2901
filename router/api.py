"""The /v1 surface (django-ninja, async). Thin: every route calls its front door (router/frontends)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI

from .core.errors import MethodNotAllowed, NotFound
from .frontends import messages, models, openai
from .frontends.responses import error_response

api = NinjaAPI(
    title="LLM router /v1",
    version="1",
    urls_namespace="v1",
    docs_url=None,
    openapi_url=None,
)


@api.post("/chat/completions", include_in_schema=False)
async def chat_completions(request: HttpRequest) -> HttpResponse:
    return await openai.handle(request, "chat/completions")


@api.post("/completions", include_in_schema=False)
async def completions(request: HttpRequest) -> HttpResponse:
    return await openai.handle(request, "completions")


@api.post("/embeddings", include_in_schema=False)
async def embeddings(request: HttpRequest) -> HttpResponse:
    return await openai.handle(request, "embeddings")


@api.post("/responses", include_in_schema=False)
async def responses(request: HttpRequest) -> HttpResponse:
    return await openai.handle(request, "responses")


@api.post("/messages", include_in_schema=False)
async def create_message(request: HttpRequest) -> HttpResponse:
    """The Anthropic Messages surface (CORE-11); errors are Anthropic-shaped."""
    return await messages.create_message(request)


@api.get("/models", include_in_schema=False)
async def list_models(request: HttpRequest) -> HttpResponse:
    return await models.list_models(request)


@api.get("/models/{path:model_id}", include_in_schema=False)
async def get_model(request: HttpRequest, model_id: str) -> HttpResponse:
    return await models.get_model(request, model_id)


_OTHER = ["GET", "PUT", "PATCH", "DELETE"]


async def _method_not_allowed(request: HttpRequest, **kwargs) -> HttpResponse:
    return error_response(MethodNotAllowed(f"Method {request.method} is not allowed on {request.path}."))


for _path in ("/chat/completions", "/completions", "/embeddings", "/responses"):
    api.api_operation(_OTHER, _path, include_in_schema=False)(_method_not_allowed)
api.api_operation(["POST", "PUT", "PATCH", "DELETE"], "/models", include_in_schema=False)(_method_not_allowed)
# Clients of /v1/messages speak Anthropic: its 404/405 use Anthropic's error shape.
api.api_operation(_OTHER, "/messages", include_in_schema=False)(messages.method_not_allowed)


async def unknown(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Anything else under /v1: OpenAI-shaped 404/405 (Anthropic-shaped under
    /v1/messages), never an HTML page."""
    if rest.strip("/") == "messages" or rest.startswith("messages/"):
        return messages.unknown(request, rest)
    known = {"chat/completions", "completions", "embeddings", "responses", "models"}
    if rest.strip("/") in known or rest.startswith("models/"):
        exc = MethodNotAllowed(f"Method {request.method} is not allowed on /v1/{rest}.")
    else:
        exc = NotFound(f"Unknown path /v1/{rest}. See /v1/models for what this router serves.")
    return error_response(exc)
