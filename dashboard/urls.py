from django.urls import path

from . import views

app_name = "dashboard"
urlpatterns = [
    path("", views.PAGE_VIEWS["overview"], name="overview"),
    path("", views.PAGE_VIEWS["overview"], name="index"),  # the original name
    path("live.json", views.live_json, name="live"),
    path("charts/<slug:metric>.json", views.chart_json, name="chart"),
    *[path(f"{slug}/", view, name=slug) for slug, view in views.PAGE_VIEWS.items() if slug != "overview"],
]
