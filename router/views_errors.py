"""Django-level error pages as OpenAI-shaped JSON (never HTML, never a traceback)."""

from django.http import HttpResponse

from .core.errors import NotFound, RouterError


def not_found(request, exception=None) -> HttpResponse:
    exc = NotFound(f"Unknown path {request.path}.")
    return HttpResponse(exc.to_body(), status=404, content_type="application/json")


def server_error(request) -> HttpResponse:
    exc = RouterError()
    return HttpResponse(exc.to_body(), status=500, content_type="application/json")
