from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic.base import RedirectView

from adminapi import api as adminapi
from config import root
from node import ops
from router import api

urlpatterns = [
    path("", root.root),  # a browser to the dashboard, anyone else a 404 saying where to go
    path("v1/", include((api.urlpatterns, "v1"))),
    path("livez", ops.livez),
    path("readyz", ops.readyz),
    path("metrics", ops.metrics),
    path("status", ops.status),
    path("api/v1/", include((adminapi.urlpatterns(), "adminapi"))),
    path("admin/", admin.site.urls),
    path("dashboard/", include("dashboard.urls")),
    # Browsers ask for /favicon.ico on every page (the admin's too).
    path("favicon.ico", RedirectView.as_view(url=static("dashboard/favicon.svg"), permanent=True)),
]

handler404 = "router.views_errors.not_found"
handler500 = "router.views_errors.server_error"
