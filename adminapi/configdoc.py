"""`/api/v1/config`: the config document, its versions, diffs and rollback.

The YAML file stays the one source of truth. A write here is validated,
written to the config file atomically and applied through the same apply as
a file edit, in one transaction with the version check
(router.services.config_write); the tasks process's file watch then finds
those bytes applied. A hand edit of the file becomes a version too, with
source "file". Versions are numbered; `If-Match: "<n>"` makes a write
conditional on version n (409 with the current one otherwise), and a PATCH
is always conditional on the version it merged into. Every answer masks
secrets (adminapi/masking.py); a masked value sent back stands for the
current one.
"""

from __future__ import annotations

import difflib
from datetime import datetime
from typing import Any

import orjson
import yaml
from django.http import HttpRequest, HttpResponse
from ninja import Field, Query, Router, Schema

from router import config_history, services
from router.config_schema import ConfigError
from router.models import ConfigVersion

from . import audit
from .auth import actor_of
from .errors import Conflict, InvalidConfig, InvalidRequest, NotFound, VersionConflict
from .masking import mask, still_masked, unmask
from .paging import PageQuery, page
from .yamltext import dump, masked_text, restored_text

router = Router(tags=["config"])

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")


class VersionOut(Schema):
    number: int
    created_at: datetime
    source: str = Field(description="file (an edit of the file), api, dashboard")
    actor: str = Field(description="token:<name> or user:<username>; empty for a file edit")
    note: str
    digest: str
    current: bool


class VersionPage(Schema):
    data: list[VersionOut]
    total: int
    limit: int
    offset: int


class ConfigOut(Schema):
    version: int | None = Field(description="the current version; If-Match takes it")
    path: str
    digest: str
    document: dict[str, Any] = Field(description="the YAML document, secrets masked")


class VersionDocument(VersionOut):
    document: dict[str, Any]


class WriteOut(Schema):
    dry_run: bool
    changed: bool = Field(description="false: the text is the one applied already")
    version: int | None = Field(description="the version now current (dry run: the one it would replace)")
    diff: str = Field(description="unified diff of the masked documents, current → new")


class DiffOut(Schema):
    from_version: int
    to_version: int
    diff: str


class WriteQuery(Schema):
    dry_run: bool = Field(False, description="validate only: report every error with its key path, change nothing")


class DocQuery(Schema):
    format: str | None = Field(None, description="yaml or json; else by Accept")


def load_document(text: bytes | str) -> Any:
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise InvalidConfig(f"not valid YAML: {exc}", extra={"errors": [{"path": None, "message": str(exc)}]}) from exc


def current_version() -> tuple[ConfigVersion | None, bytes]:
    """The newest version and its text (the file's bytes when no version exists yet)."""
    version = config_history.latest()
    if version is None:
        path = services.resolve_config_path()
        text = path.read_bytes() if path.exists() else b""
        config_history.seed(path, text, services.file_digest(text))
        version = config_history.latest()
        if version is None:
            return None, text
    return version, version.text.encode()


def _wants_yaml(request: HttpRequest, fmt: str | None) -> bool:
    if fmt is not None:
        return fmt == "yaml"
    accept = request.headers.get("Accept", "")
    return any(t in accept for t in YAML_TYPES)


def _etagged(answer: HttpResponse, number: int | None) -> HttpResponse:
    if number is not None:
        answer["ETag"] = f'"{number}"'
    return answer


def _doc_answer(
    request: HttpRequest, fmt: str | None, number: int | None, payload: dict[str, Any], text: str
) -> HttpResponse:
    """The document as JSON, or as YAML: `text`, masked in place (comments kept)."""
    if _wants_yaml(request, fmt):
        answer = HttpResponse(masked_text(text), content_type="application/yaml; charset=utf-8")
    else:
        answer = HttpResponse(orjson.dumps(payload, default=str), content_type="application/json")
    return _etagged(answer, number)


def _version_out(v: ConfigVersion, current: int | None) -> dict[str, Any]:
    return {"number": v.number, "created_at": v.created_at, "source": v.source, "actor": v.actor, "note": v.note,
            "digest": v.digest, "current": v.number == current}


def if_match(request: HttpRequest) -> int | None:
    raw = request.headers.get("If-Match")
    if raw is None or raw.strip() == "*":
        return None
    value = raw.strip().removeprefix("W/").strip('"')
    if not value.isdigit():
        raise InvalidRequest('If-Match: expected the version number as an entity tag, e.g. "7"', param="If-Match")
    return int(value)


def _errors(exc: ConfigError, path: str) -> list[dict[str, Any]]:
    out = []
    for line in str(exc).splitlines():
        line = line.removeprefix(f"{path}: ")
        where, sep, message = line.partition(": ")
        if sep and " " not in where.strip():
            out.append({"path": where, "message": message})
        else:
            out.append({"path": None, "message": line})
    return out


def _diff(old: Any, new: Any, old_name: str, new_name: str) -> str:
    return "".join(
        difflib.unified_diff(
            dump(mask(old)).splitlines(keepends=True), dump(mask(new)).splitlines(keepends=True), old_name, new_name
        )
    )


def _source(actor: str) -> str:
    """A staff session is the dashboard (its pages call this API); a token is
    a script."""
    return "dashboard" if actor.startswith("user:") else "api"


def write_text(request: HttpRequest, text: bytes, *, dry_run: bool, expected: int | None, action: str, note: str = ""
           ) -> WriteOut:  # fmt: skip
    """Validate `text`, then (unless a dry run) make it the config."""
    version, current_text = current_version()
    number = version.number if version else None
    path = str(services.resolve_config_path())
    changed = services.file_digest(text) != services.file_digest(current_text)
    diff = _diff(load_document(current_text), load_document(text), f"version {number}", "new")
    try:
        if dry_run:
            services.config_check(text)
            if expected is not None and expected != number:
                raise config_history.VersionConflict(number)
            return WriteOut(dry_run=True, changed=changed, version=number, diff=diff)
        actor = actor_of(request).name
        after = services.file_digest(text)

        def audited(now: int | None) -> None:
            audit.record(actor, action, "config", digests=(version.digest if version else "", after),
                         detail={"from_version": number, "to_version": now, **({"note": note} if note else {})})

        now = services.config_write(
            text, origin=config_history.Origin(_source(actor), actor, note), expected=expected, also=audited if changed else None
        )
    except services.ConfigNotWritable as exc:
        raise Conflict(str(exc)).with_code("config_not_writable") from exc
    except config_history.VersionConflict as exc:
        raise VersionConflict(
            f"The config is at version {exc.current}; fetch it and apply your change again.",
            param="If-Match", extra={"current_version": exc.current},
        ) from exc  # fmt: skip
    except ConfigError as exc:
        errors = _errors(exc, path)
        raise InvalidConfig(
            "; ".join(f"{e['path'] or '<document>'}: {e['message']}" for e in errors),
            param=errors[0]["path"] if errors else None, extra={"errors": errors},
        ) from exc  # fmt: skip
    except OSError as exc:
        raise Conflict(f"the config file cannot be written: {exc.strerror}").with_code("config_not_writable") from exc
    return WriteOut(dry_run=False, changed=changed, version=now, diff=diff)


def _body_document(request: HttpRequest) -> tuple[Any, bytes | None]:
    """The body as a document, and its text when it came as YAML (kept as
    written, comments and all, unless a masked value had to be put back)."""
    kind = request.content_type or ""
    if kind in YAML_TYPES:
        return load_document(request.body), request.body
    if kind in ("application/json", "application/merge-patch+json"):
        try:
            return orjson.loads(request.body or b"null"), None
        except orjson.JSONDecodeError as exc:
            raise InvalidRequest(f"the body is not valid JSON: {exc}") from exc
    raise InvalidRequest("Content-Type: expected application/yaml or application/json", param="Content-Type")


def text_for(new: Any, raw: bytes | None, current: Any) -> bytes:
    if not isinstance(new, dict):
        raise InvalidConfig("the document must be a mapping of sections", extra={"errors": [
            {"path": None, "message": "the top level must be a mapping of sections"}]})  # fmt: skip
    restored = unmask(new, current)
    left = still_masked(restored)
    if left:
        raise InvalidConfig(
            f"{left[0]}: a masked value (***) with no current value to stand for; send the value itself",
            param=left[0], extra={"errors": [{"path": p, "message": "masked value with no current value"} for p in left]},
        )  # fmt: skip
    if raw is not None and restored == new:
        return raw
    if raw is not None:  # YAML as sent, with the secrets put back in place (comments kept)
        return restored_text(raw.decode(), restored).encode()
    return dump(restored).encode()


_DOC_RESPONSES = {200: ConfigOut}
_YAML_BODY = {
    "requestBody": {
        "content": {
            "application/yaml": {"schema": {"type": "string"}},
            "application/json": {"schema": {"type": "object", "additionalProperties": True}},
        },
        "required": True,
    }
}
_PATCH_BODY = {
    "requestBody": {
        "content": {
            "application/merge-patch+json": {"schema": {"type": "object", "additionalProperties": True}},
            "application/json": {"schema": {"type": "object", "additionalProperties": True}},
        },
        "required": True,
    }
}


@router.get("", response=_DOC_RESPONSES, summary="The current config (secrets masked; JSON, or YAML by Accept)")
def get_config(request: HttpRequest, q: Query[DocQuery]) -> HttpResponse:
    version, text = current_version()
    number = version.number if version else None
    payload = {"version": number, "path": str(services.resolve_config_path()),
               "digest": services.file_digest(text), "document": mask(load_document(text))}  # fmt: skip
    return _doc_answer(request, q.format, number, payload, text.decode())


@router.put("", response=WriteOut, openapi_extra=_YAML_BODY, summary="Replace the whole config")
def put_config(request: HttpRequest, q: Query[WriteQuery]) -> WriteOut:
    _version_now, current_text = current_version()
    new, raw = _body_document(request)
    text = text_for(new, raw, load_document(current_text))
    return write_text(request, text, dry_run=q.dry_run, expected=if_match(request), action="config.put")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


@router.patch("", response=WriteOut, openapi_extra=_PATCH_BODY, summary="Change the config by a JSON merge patch")
def patch_config(request: HttpRequest, q: Query[WriteQuery]) -> WriteOut:
    version, current_text = current_version()
    number = version.number if version else None
    expected = if_match(request)
    if expected is not None and expected != number and not q.dry_run:
        raise VersionConflict(f"The config is at version {number}.", param="If-Match",
                              extra={"current_version": number})  # fmt: skip
    patch, _ = _body_document(request)
    if not isinstance(patch, dict):
        raise InvalidRequest("a merge patch is a JSON object")
    current = load_document(current_text)
    text = text_for(merge_patch(mask(current), patch), None, current)
    # Conditional on the version it merged into, If-Match or not: a PATCH never
    # silently undoes a change it did not see.
    return write_text(request, text, dry_run=q.dry_run, expected=number if expected is None else expected,
                  action="config.patch")  # fmt: skip


@router.get("/versions", response=VersionPage, summary="The config's versions, newest first")
def list_versions(request: HttpRequest, q: Query[PageQuery]) -> dict:
    current_version()  # seeds version 1 for a mirror applied before versions were kept
    current = config_history.latest_number()
    rows, facts = page(ConfigVersion.objects.order_by("-number").defer("text"), q)
    return {"data": [_version_out(v, current) for v in rows], **facts}


def _version(number: int) -> ConfigVersion:
    v = ConfigVersion.objects.filter(number=number).first()
    if v is None:
        raise NotFound(f"No config version {number} (only the newest are kept).", param="number")
    return v


@router.get("/versions/{int:number}", response=VersionDocument, summary="One version (secrets masked)")
def get_version(request: HttpRequest, number: int, q: Query[DocQuery]) -> HttpResponse:
    v = _version(number)
    payload = {**_version_out(v, config_history.latest_number()), "document": mask(load_document(v.text))}
    return _doc_answer(request, q.format, None, payload, v.text)


@router.get("/versions/{int:a}/diff/{int:b}", response=DiffOut, summary="Unified diff of two versions (masked)")
def diff_versions(request: HttpRequest, a: int, b: int) -> DiffOut:
    old, new = _version(a), _version(b)
    return DiffOut(from_version=a, to_version=b,
                   diff=_diff(load_document(old.text), load_document(new.text), f"version {a}", f"version {b}"))  # fmt: skip


@router.post("/versions/{int:number}/rollback", response=WriteOut,
             summary="Make an old version current again (a new version with its text)")  # fmt: skip
def rollback(request: HttpRequest, number: int, q: Query[WriteQuery]) -> WriteOut:
    v = _version(number)
    return write_text(request, v.text.encode(), dry_run=q.dry_run, expected=if_match(request), action="config.rollback",
                  note=f"rollback to version {number}")  # fmt: skip

