"""Only the admin: the keys tests must not depend on the rest of the URLconf."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
