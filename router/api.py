"""The /v1 surface (django-ninja, async). Thin: every route calls its front door (router/frontends).

No framework answer stands between a client and the error shape it parses:

- every /v1 answer is OpenAI-shaped JSON (Anthropic-shaped under
  /v1/messages, whose clients speak Anthropic);
- a method a path does not serve (HEAD, OPTIONS and TRACE included: there is
  no CORS here) is 405 `method_not_allowed` with an `Allow` header — ninja
  answers such a method with Django's `HttpResponseNotAllowed`, which
  `_shaped` turns into our error;
- a path not routed here is 404 `not_found`: a trailing slash is another
  path (`/v1/chat/completions/`, `/v1/models/`), answered with a hint.

Adding a route is one ninja operation below.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from django.http import HttpRequest, HttpResponseBase, HttpResponseNotAllowed
from django.urls import URLPattern, re_path
from ninja import NinjaAPI

from .core.errors import MethodNotAllowed, NotFound
from .frontends import messages, models, openai, surface
from .frontends.responses import error_response

api = NinjaAPI(
    title="LLM router /v1",
    version="1",
    urls_namespace="v1",
    docs_url=None,
    openapi_url=None,
)


@api.post("/chat/completions", include_in_schema=False)
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    return await openai.handle(request, "chat/completions")


@api.post("/completions", include_in_schema=False)
async def completions(request: HttpRequest) -> HttpResponseBase:
    return await openai.handle(request, "completions")


@api.post("/embeddings", include_in_schema=False)
async def embeddings(request: HttpRequest) -> HttpResponseBase:
    return await openai.handle(request, "embeddings")


@api.post("/responses", include_in_schema=False)
async def responses(request: HttpRequest) -> HttpResponseBase:
    return await openai.handle(request, "responses")


@api.post("/messages", include_in_schema=False)
async def create_message(request: HttpRequest) -> HttpResponseBase:
    """The Anthropic Messages surface (CORE-11); errors are Anthropic-shaped."""
    return await messages.create_message(request)


@api.post("/messages/count_tokens", include_in_schema=False)
async def count_message_tokens(request: HttpRequest) -> HttpResponseBase:
    """Anthropic's token count: the provider's count, or the router's marked estimate."""
    return await messages.count_tokens(request)


@api.get("/models", include_in_schema=False)
async def list_models(request: HttpRequest) -> HttpResponseBase:
    return await models.list_models(request)


@api.get("/models/{path:model_id}", include_in_schema=False)
async def get_model(request: HttpRequest, model_id: str) -> HttpResponseBase:
    return await models.get_model(request, model_id)


View = Callable[..., Awaitable[HttpResponseBase]]


def _shaped(view: View) -> View:
    """Ninja's route view, with its plain-text 405 answered in our error shape."""

    async def shaped(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponseBase:
        response = await view(request, *args, **kwargs)
        if not isinstance(response, HttpResponseNotAllowed):
            return response
        if request.path.rstrip("/").endswith(("/v1/messages", "/v1/messages/count_tokens")):
            refusal = messages.method_not_allowed(request)
        else:
            refusal = error_response(MethodNotAllowed(f"Method {request.method} is not allowed on {request.path}."))
        refusal["Allow"] = ", ".join(sorted(m.strip() for m in response["Allow"].split(",")))
        return refusal

    shaped.csrf_exempt = True  # type: ignore[attr-defined]
    return shaped


async def unknown(request: HttpRequest, rest: str = "") -> HttpResponseBase:
    """Any other path under /v1: 404, OpenAI-shaped (Anthropic-shaped under /v1/messages)."""
    if rest.startswith("messages"):
        return messages.unknown(request, rest)
    served = {str(p.pattern).rstrip("/") for p in _ROUTES} | {p.removeprefix("/v1/") for p in surface.PATHS}
    hint = f"Did you mean /v1/{rest.rstrip('/')}? " if rest.endswith("/") and rest.rstrip("/") in served else ""
    return error_response(NotFound(f"Unknown path /v1/{rest}. {hint}See /v1/models for what this router serves."))


unknown.csrf_exempt = True  # type: ignore[attr-defined]

# Every operation route (not ninja's empty api-root: /v1/ is an unknown path like any other).
_ROUTES: list[URLPattern] = [p for p in api.urls[0] if isinstance(p, URLPattern) and str(p.pattern)]
urlpatterns: list[URLPattern] = [
    URLPattern(p.pattern, _shaped(p.callback), p.default_args, p.name) for p in _ROUTES
]
urlpatterns.append(re_path(r"^(?P<rest>.*)$", unknown))
