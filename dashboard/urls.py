from django.urls import path

from . import files, key_usage, views

app_name = "dashboard"
urlpatterns = [
    path("", views.PAGE_VIEWS["overview"], name="overview"),
    path("", views.PAGE_VIEWS["overview"], name="index"),  # the original name
    path("live.json", views.live_json, name="live"),
    path("keys/usage.csv", key_usage.usage_csv, name="key_usage_csv"),
    path("keys/<path:ref>/usage.json", key_usage.key_usage_json, name="key_usage_json"),
    path("keys/<path:ref>/usage.csv", key_usage.key_usage_csv, name="key_usage_ref_csv"),
    path("keys/<path:ref>/", key_usage.key_detail, name="key_usage"),
    path("charts/<slug:metric>.json", views.chart_json, name="chart"),
    path("files/", files.files_page, name="files"),  # before the pages' generic views: it wins
    *[path(f"{slug}/", view, name=slug) for slug, view in views.PAGE_VIEWS.items() if slug != "overview"],
]
