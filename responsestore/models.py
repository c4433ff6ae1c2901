"""One stored response: the answer and the conversation it was made from.

`input_items` is the whole conversation the upstream was sent for it — the
items of the response it continued (its own input items and output) and the
request's own input — so continuing from it is one row read, whatever the
chain's length. Both JSON columns hold orjson text: read back byte for byte
as written (PostgreSQL's jsonb would reorder keys and cost a parse).
"""

from __future__ import annotations

from django.db import models


class StoredResponse(models.Model):
    id = models.CharField(primary_key=True, max_length=100)  # the response's own id ("resp_…")
    # The API key's record id ("operator:<pk>", "coordinator:<key_id>"), or ""
    # for the anonymous callers of an open router (one shared pool).
    owner = models.CharField(max_length=200, blank=True)
    owner_name = models.CharField(max_length=200, blank=True)  # the key's name then
    model = models.CharField(max_length=200, blank=True)
    previous_response_id = models.CharField(max_length=100, blank=True)
    created_at = models.FloatField()  # epoch seconds, when it was stored (the retention counts from it)
    input_items = models.TextField()  # JSON list of items, each with an "id"
    response = models.TextField()  # JSON: the Response object as the client got it

    class Meta:
        indexes = [
            models.Index(fields=["created_at"], name="responsestore_created"),
            models.Index(fields=["owner", "created_at"], name="responsestore_owner_created"),
        ]

    def __str__(self) -> str:
        return self.id
