"""Uploaded files and batches in the admin: read-only (clients own them,
through /v1/files and /v1/batches)."""

from __future__ import annotations

from django.contrib import admin

from router.admin import ReadOnlyAdmin

from .models import Batch, StoredFile


@admin.register(StoredFile)
class StoredFileAdmin(ReadOnlyAdmin):
    list_display = ("id", "filename", "purpose", "bytes", "owner_name", "owner", "created_at")
    list_filter = ("purpose",)
    search_fields = ("id", "filename", "owner", "owner_name")


@admin.register(Batch)
class BatchAdmin(ReadOnlyAdmin):
    list_display = ("id", "status", "endpoint", "model", "total", "completed", "failed", "owner_name", "created_at")
    list_filter = ("status", "endpoint")
    search_fields = ("id", "owner", "owner_name", "input_file_id")
