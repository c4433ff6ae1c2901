"""The /v1 surface: one table of paths and their methods, each calling its front door.

Plain Django URL patterns over a method table, so that no framework answer
stands between a client and the error shape it parses:

- every /v1 answer is OpenAI-shaped JSON (Anthropic-shaped under
  /v1/messages, whose clients speak Anthropic);
- a method a path does not serve (HEAD, OPTIONS and TRACE included: there is
  no CORS here) is 405 `method_not_allowed` with an `Allow` header;
- a path not in the table is 404 `not_found`: a trailing slash is another
  path (`/v1/chat/completions/`, `/v1/models/`), answered with a hint.

Adding a route is one row in `ROUTES`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from django.http import HttpRequest, HttpResponseBase
from django.urls import URLPattern, path, re_path

from .core.errors import MethodNotAllowed, NotFound
from .frontends import messages, models, openai
from .frontends.responses import error_response

View = Callable[..., Awaitable[HttpResponseBase]]


def _door(endpoint: str) -> View:
    async def view(request: HttpRequest) -> HttpResponseBase:
        return await openai.handle(request, endpoint)

    return view


# path under /v1/ → {method: view}. `messages` answers in Anthropic's shape.
ROUTES: Mapping[str, Mapping[str, View]] = {
    "chat/completions": {"POST": _door("chat/completions")},
    "completions": {"POST": _door("completions")},
    "embeddings": {"POST": _door("embeddings")},
    "responses": {"POST": _door("responses")},
    "messages": {"POST": messages.create_message},
    "models": {"GET": models.list_models},
    "models/<path:model_id>": {"GET": models.get_model},
}
_ANTHROPIC = frozenset({"messages"})


def _dispatch(route: str, methods: Mapping[str, View]) -> View:
    allow = ", ".join(sorted(methods))

    async def view(request: HttpRequest, **kwargs: str) -> HttpResponseBase:
        handler = methods.get(request.method or "")
        if handler is not None:
            return await handler(request, **kwargs)
        if route in _ANTHROPIC:
            response = messages.method_not_allowed(request)
        else:
            response = error_response(MethodNotAllowed(f"Method {request.method} is not allowed on {request.path}."))
        response["Allow"] = allow
        return response

    view.csrf_exempt = True  # type: ignore[attr-defined]
    return view


async def unknown(request: HttpRequest, rest: str = "") -> HttpResponseBase:
    """Any other path under /v1: 404, OpenAI-shaped (Anthropic-shaped under /v1/messages)."""
    if rest.startswith("messages"):
        return messages.unknown(request, rest)
    hint = f"Did you mean /v1/{rest.rstrip('/')}? " if rest.endswith("/") and rest.rstrip("/") in ROUTES else ""
    return error_response(NotFound(f"Unknown path /v1/{rest}. {hint}See /v1/models for what this router serves."))


unknown.csrf_exempt = True  # type: ignore[attr-defined]

urlpatterns: list[URLPattern] = [path(route, _dispatch(route, methods)) for route, methods in ROUTES.items()]
urlpatterns.append(re_path(r"^(?P<rest>.*)$", unknown))
