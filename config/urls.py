from django.contrib import admin
from django.urls import include, path, re_path

from router import ops
from router.api import api, unknown

urlpatterns = [
    path("v1/", api.urls),
    re_path(r"^v1/(?P<rest>.*)$", unknown),
    path("livez", ops.livez),
    path("readyz", ops.readyz),
    path("metrics", ops.metrics),
    path("status", ops.status),
    path("admin/", admin.site.urls),
    path("dashboard/", include("dashboard.urls")),
]

handler404 = "router.views_errors.not_found"
handler500 = "router.views_errors.server_error"
