"""`/api/v1/config/export` and `/import`: the router's managed state as one
JSON document, and the config part of such a document applied back.

An export holds the config document (the current version, secrets masked as
in every answer), the API keys' metadata (never a secret or its hash: a key
cannot be carried to another router, only recreated there) and the names of
the drained backends. An import applies the export's config document only,
through the same write as `PUT /config` (validation, `dry_run`, `If-Match`,
one new version, the audit): a masked value in it stands for the current
value at the same place, so an export imported back into the router that
made it needs no secret; imported anywhere else, every masked secret must be
filled in first (refused with its path otherwise). Keys and drains in the
document are reported, not applied.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from django.utils import timezone
from ninja import Field, Query, Router, Schema

from keys.models import ApiKey
from router import services
from router.models import Backend

from .configdoc import WriteOut, WriteQuery, current_version, if_match, load_document, text_for, write_text
from .errors import InvalidRequest
from .keys import KeyOut, key_out
from .masking import mask

router = Router(tags=["config"])

FORMAT = "llm-router-export/1"
# Keys exported at most: the export is one answer, built in memory.
MAX_KEYS = 200_000


class ExportedConfig(Schema):
    version: int | None
    digest: str = Field(description="the file digest of the current version (the versions' `digest`)")
    document: dict[str, Any] = Field(description="the YAML document, secrets masked (***)")


class ExportOut(Schema):
    format: Literal["llm-router-export/1"]
    exported_at: datetime
    config: ExportedConfig
    keys: list[KeyOut] | None = Field(description="every key that is not revoked, metadata only; null with keys=false")
    drained: list[str] = Field(description="backends drained now (not applied by an import)")


class ExportQuery(Schema):
    keys: bool = Field(True, description="false: leave the keys out")


class ImportOut(WriteOut):
    ignored: list[str] = Field(description="sections of the document that an import does not apply (keys, drained)")


@router.get("/export", response=ExportOut, summary="The config (secrets masked), the keys' metadata and the drains")
def export_config(request: HttpRequest, q: Query[ExportQuery]) -> dict:
    version, text = current_version()
    keys = None
    if q.keys:
        rows = ApiKey.objects.filter(revoked_at__isnull=True).order_by("pk")[:MAX_KEYS]
        keys = [key_out(k) for k in rows.iterator(chunk_size=2000)]
    drained = sorted(Backend.objects.filter(drained=True).values_list("name", flat=True))
    return {
        "format": FORMAT,
        "exported_at": timezone.now(),
        "config": {"version": version.number if version else None, "digest": services.file_digest(text),
                   "document": mask(load_document(text))},
        "keys": keys,
        "drained": drained,
    }  # fmt: skip


class ImportIn(Schema):
    """An export's shape; other top-level fields (`exported_at`) are ignored."""

    format: str | None = Field(None, description=f"{FORMAT} (what an export says); absent is taken as that")
    config: dict[str, Any] = Field(description="`config.document` is applied; the rest of `config` is informational")
    keys: list[dict[str, Any]] | None = Field(None, description="reported in `ignored`, never applied")
    drained: list[str] | None = Field(None, description="reported in `ignored`, never applied")


@router.post("/import", response=ImportOut, summary="Apply an export's config document as a new version")
def import_config(request: HttpRequest, body: ImportIn, q: Query[WriteQuery]) -> dict:
    if body.format is not None and body.format != FORMAT:
        raise InvalidRequest(f"format: {body.format!r} is not one this router reads (expected {FORMAT!r})",
                             param="format")  # fmt: skip
    document = body.config.get("document")
    if not isinstance(document, dict):
        raise InvalidRequest("config.document: the config document (a mapping of sections) is required",
                             param="config.document")  # fmt: skip
    _version, current_text = current_version()
    text = text_for(document, None, load_document(current_text))
    out = write_text(request, text, dry_run=q.dry_run, expected=if_match(request), action="config.import", note="import")
    ignored = [name for name, value in (("keys", body.keys), ("drained", body.drained)) if value]
    return {**out.model_dump(), "ignored": ignored}
