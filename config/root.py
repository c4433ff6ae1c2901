"""`/`: where a visitor is sent (nothing is served there).

- A browser (its Accept names text/html) is redirected (302) to the
  dashboard, which sends a visitor who is not signed in to the admin login.
- Any other client gets the 404 every unknown path gets, in the OpenAI error
  shape, whose message names the API base (/v1), the dashboard, the probes
  and the documentation. Not a 200: a load balancer or uptime check left at
  its default path (`/`) must fail loudly instead of counting an unready
  node as healthy (/readyz is the probe), and `/` is no API that clients may
  come to depend on.

The answer depends on Accept, so it says `Vary: Accept`.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.cache import patch_vary_headers
from django.views.decorators.csrf import csrf_exempt

from router.core.errors import NotFound

DASHBOARD = "/dashboard/"
WHERE_TO_GO = (
    "Nothing is served at /. The OpenAI-compatible API is at /v1 (an SDK's base_url ends in /v1; "
    "GET /v1/models lists the models); the dashboard is at /dashboard/; the probes are /livez and "
    "/readyz; the documentation is the router's README.md and docs/."
)


def wants_html(request: HttpRequest) -> bool:
    """True when the Accept header names text/html itself (a browser); `*/*`
    alone (curl, SDKs) does not count, nor does text/html;q=0 (Django drops it)."""
    return any(t.main_type == "text" and t.sub_type == "html" for t in request.accepted_types)


@csrf_exempt  # a POST gets the 404 of any unknown path, not a CSRF page: nothing here changes state
def root(request: HttpRequest) -> HttpResponse:
    if request.method in ("GET", "HEAD") and wants_html(request):
        response: HttpResponse = HttpResponseRedirect(DASHBOARD)
    else:
        response = HttpResponse(NotFound(WHERE_TO_GO).to_body(), status=404, content_type="application/json")
    patch_vary_headers(response, ("Accept",))
    return response
