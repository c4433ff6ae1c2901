"""The admin API at /api/v1 (django-ninja, sync views): one NinjaAPI, one
router per resource, every refusal in the one error shape (adminapi/errors.py).

No framework answer reaches a client as is: ninja's authentication and
validation errors, Django's 404 and a method a path does not serve are each
translated into the catalogue here. The OpenAPI schema and the interactive
docs are for staff sessions and admin tokens only.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, HttpResponseNotAllowed
from django.urls import URLPattern, URLResolver, re_path
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from . import admin_tokens, audit_log, backends, config_transfer, configdoc, keys, prefix_index, response_cache
from .auth import AdminAuth, identify
from .errors import AdminApiError, InvalidRequest, MethodNotAllowed, NotFound, Unauthenticated


def _docs_guard(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The schema and the docs page: a staff session or an admin token."""

    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            identify(request)
        except AdminApiError as exc:
            return exc.response()
        return view(request, *args, **kwargs)

    return guarded


api = NinjaAPI(
    title="LLM router admin API",
    version="1",
    description=(
        "Keys, config with versions, rollback, export and import, backends with drain, the response cache, "
        "the prefix index and the audit log. "
        "See docs/admin-api.md."
    ),
    urls_namespace="adminapi",
    auth=AdminAuth(),
    docs_url="/docs",
    openapi_url="/openapi.json",
    docs_decorator=_docs_guard,
)

api.add_router("/keys", keys.router)
api.add_router("/config", configdoc.router)
api.add_router("/config", config_transfer.router)
api.add_router("/backends", backends.router)
api.add_router("/tokens", admin_tokens.router)
api.add_router("/audit", audit_log.router)
api.add_router("/response-cache", response_cache.router)
api.add_router("/prefix-index", prefix_index.router)


def _loc(loc: Any) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header", "payload", "filters", "q")]
    out = ""
    for p in parts:
        out += f"[{p}]" if p.isdigit() else (f".{p}" if out else p)
    return out or None


@api.exception_handler(AdminApiError)
def _catalogued(request: HttpRequest, exc: AdminApiError) -> HttpResponse:
    return exc.response()


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return Unauthenticated().response()


@api.exception_handler(NinjaValidationError)
def _invalid(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    errors = [{"param": _loc(e.get("loc", ())), "message": str(e.get("msg", ""))} for e in exc.errors]
    first = errors[0] if errors else {"param": None, "message": "invalid"}
    text = "; ".join(f"{e['param'] or '<body>'}: {e['message']}" for e in errors) or "The request is invalid."
    return InvalidRequest(text, param=first["param"], extra={"errors": errors}).response()


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    cls = {404: NotFound, 405: MethodNotAllowed}.get(exc.status_code, InvalidRequest)
    return cls(str(exc)).response()


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return NotFound().response()




def _shaped(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Ninja's route view with its plain-text 405 answered in our shape."""

    @wraps(view)
    def shaped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        if isinstance(response, HttpResponseNotAllowed):
            refusal = MethodNotAllowed(f"Method {request.method} is not allowed on {request.path}.").response()
            refusal["Allow"] = response["Allow"]
            return refusal
        return response

    return shaped


def unknown(request: HttpRequest, rest: str = "") -> HttpResponse:
    return NotFound(f"Unknown path {request.path}. The schema is at /api/v1/openapi.json.").response()


unknown.csrf_exempt = True  # type: ignore[attr-defined]


def urlpatterns() -> list[URLPattern | URLResolver]:
    patterns = api.urls[0]
    out: list[URLPattern | URLResolver] = []
    for p in patterns:
        if not isinstance(p, URLPattern):
            continue
        # The root stays (ninja reverses its name to find the prefix) but
        # answers as any unknown path does.
        view = _shaped(p.callback) if str(p.pattern) else unknown
        view.csrf_exempt = True  # type: ignore[attr-defined]
        out.append(URLPattern(p.pattern, view, p.default_args, p.name))
    out.append(re_path(r"^(?P<rest>.*)$", unknown))
    return out
