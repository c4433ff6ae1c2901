"""One uploaded file: its metadata here, its bytes in the `router_files` storage.

Invariant: a row exists only once its bytes are stored (services.file_create
saves the bytes first), so a listed file can always be downloaded.
"""

from __future__ import annotations

from django.db import models


class StoredFile(models.Model):
    id = models.CharField(primary_key=True, max_length=40)  # "file-<24 hex>", OpenAI's shape
    # The owning API key's record id ("operator:<pk>", "coordinator:<key_id>"),
    # or "" for the anonymous callers of an open router (one shared pool).
    owner = models.CharField(max_length=200, blank=True)
    owner_name = models.CharField(max_length=200, blank=True)  # the key's name then, for operators
    filename = models.CharField(max_length=255)
    purpose = models.CharField(max_length=32)
    bytes = models.BigIntegerField()
    created_at = models.BigIntegerField()  # epoch seconds, as the wire says
    storage_name = models.CharField(max_length=300)  # the name the storage backend gave it

    class Meta:
        indexes = [models.Index(fields=["owner", "created_at", "id"], name="filestore_owner_created")]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.id} ({self.filename})"
