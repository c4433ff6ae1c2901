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


class Batch(models.Model):
    """One batch (`/v1/batches`): its state and counts; its lines' results
    are `BatchLine` rows until it ends, then its output and error files.

    Invariants: `status` only moves forward (validating → in_progress →
    finalizing → completed; or failed, cancelling → cancelled, expired),
    every move a conditional update on the status it leaves, so a cancel and
    the runner never overwrite each other."""

    id = models.CharField(primary_key=True, max_length=40)  # "batch_<24 hex>"
    owner = models.CharField(max_length=200, blank=True)  # as StoredFile.owner
    owner_name = models.CharField(max_length=200, blank=True)
    endpoint = models.CharField(max_length=40)  # "/v1/chat/completions", …
    input_file_id = models.CharField(max_length=40)
    completion_window = models.CharField(max_length=8)
    metadata = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16, db_index=True)
    model = models.CharField(max_length=200, blank=True)  # the first line's model
    total = models.IntegerField(default=0)
    completed = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)
    errors = models.JSONField(null=True, blank=True)  # validation errors: [{code, message, param, line}]
    output_file_id = models.CharField(max_length=40, null=True, blank=True)
    error_file_id = models.CharField(max_length=40, null=True, blank=True)
    created_at = models.BigIntegerField()
    expires_at = models.BigIntegerField()
    in_progress_at = models.BigIntegerField(null=True, blank=True)
    finalizing_at = models.BigIntegerField(null=True, blank=True)
    completed_at = models.BigIntegerField(null=True, blank=True)
    failed_at = models.BigIntegerField(null=True, blank=True)
    expired_at = models.BigIntegerField(null=True, blank=True)
    cancelling_at = models.BigIntegerField(null=True, blank=True)
    cancelled_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["owner", "created_at", "id"], name="filestore_batch_owner_created")]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"


class BatchLine(models.Model):
    """The result of one line of a running batch: at most one per line (the
    unique constraint), written once the line's answer is whole, so a runner
    that resumes a batch skips exactly the lines that have one."""

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="lines")
    line = models.IntegerField()  # 1-based, as in the input file
    ok = models.BooleanField()  # a 2xx answer: the output file; else the error file
    output = models.TextField()  # the output line (JSON) as written to its file

    class Meta:
        constraints = [models.UniqueConstraint(fields=["batch", "line"], name="filestore_batchline_once")]
