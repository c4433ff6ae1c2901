"""Writes to the routing mirror (HackSoft style: services write, selectors read).

`config_sync` owns the `config` namespace: it makes the Backend rows of source
`config` equal the YAML file and never touches `admin` or `appproxy` rows.

`config_write` is how anything but an editor changes the config (the admin
API): it writes the file atomically and applies it through the same `_apply`
in one transaction, so the file stays the one source of truth and the file
watch finds its bytes already applied. Every applied text is a version
(router/config_history.py), attributed to the writer that applied it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from redis.exceptions import LockError, RedisError

from . import config_history, global_prompts
from .bulk import insert_rows
from .config_schema import COMMAND_SECTION, ConfigError, load, parse_tracked
from .models import Backend, ConfigDocument, Source
from .redis import sync_client
from .revision import BACKEND, DOCUMENT, NOTHING, bump_revision, touch

log = logging.getLogger(__name__)

DEMO_CONFIG = Path(__file__).resolve().parent.parent / "fakes" / "demo.yaml"


def resolve_config_path() -> Path:
    """ROUTER_CONFIG, else ./router.yaml at the repo root, else the demo config."""
    if settings.ROUTER_CONFIG:
        return Path(settings.ROUTER_CONFIG)
    local = Path(settings.BASE_DIR) / "router.yaml"
    return local if local.exists() else DEMO_CONFIG


# Mixed into the file digest: changing it makes every node re-apply its file
# once. "2": backend URLs are stored as their ${VAR} template.
_MIRROR_FORMAT = b"router-mirror 2\n"


_FIELDS = (
    "url", "kind", "models", "served_model", "weight", "capacity", "priority",
    "api_key", "connect_timeout", "read_timeout", "extra",
)


def _backend_fields(raw: dict, parsed) -> dict:
    return {
        # The raw template (e.g. http://user:${PASS}@host), resolved only when
        # the snapshot is compiled: the DB never holds a secret of the URL.
        "url": str(raw.get("url") or parsed.url).rstrip("/"),
        "kind": parsed.kind,
        "models": list(parsed.models),
        "served_model": parsed.served_model or "",
        "weight": parsed.weight,
        "capacity": parsed.capacity,
        "priority": parsed.priority,
        # The raw template (e.g. ${VLLM_KEY}), never the resolved secret.
        "api_key": str(raw.get("api_key") or ""),
        "connect_timeout": parsed.connect_timeout,
        "read_timeout": parsed.read_timeout,
        "extra": _extra(raw, parsed),
    }


def _extra(raw: dict, parsed) -> dict:
    extra = {"headers": dict(raw.get("headers") or {}), "discover_models": parsed.discover_models}
    if parsed.responses != "auto":  # the default is stored as nothing (rows written before it stay equal)
        extra["responses"] = parsed.responses
    if parsed.quota is not None:
        extra["quota"] = parsed.quota.model_dump(exclude_none=True)
    if parsed.role != "both":  # as responses: the default is stored as nothing
        extra["role"] = parsed.role
    if parsed.bootstrap_port is not None:
        extra["bootstrap_port"] = parsed.bootstrap_port
    if parsed.cli is not None:
        # The raw section (its ${VAR} templates kept), resolved when the
        # snapshot is compiled, as the URL and the api_key are.
        extra["command"] = dict(raw.get(COMMAND_SECTION) or {})
    return extra


def config_sync(
    path: Path | None = None, *, force: bool = False, incremental: bool = False,
    origin: config_history.Origin | None = None,
) -> bool:
    """Apply the YAML file to the DB mirror. Returns True when something changed.

    Raises ConfigError (naming file, key and fix) on an invalid file; the
    previous state is then kept untouched.

    ``incremental`` (the tasks process, the file's one writer, on every
    edit): remember this parse, and next time compare only the backends whose
    text changed since (when the DB still holds what this process applied).
    """
    path = path or resolve_config_path()
    text = path.read_bytes() if path.exists() else b""
    digest = hashlib.sha256(_MIRROR_FORMAT + text).hexdigest()
    if not force and _applied_already(path, digest):
        if incremental:
            _remember_applied(path, digest)
        return False  # already applied (checked again under the lock below); no parse
    if force:
        return _apply(path, text, digest, force=True, incremental=incremental, origin=origin)
    with _parsing(digest) as another:
        if another and _applied_already(path, digest):
            if incremental:
                _remember_applied(path, digest)
            return False  # the other process applied these very bytes
        return _apply(path, text, digest, force=False, incremental=incremental, origin=origin)


def _applied_already(path: Path, digest: str) -> bool:
    """The DB holds these very bytes, and the prompt files they name still
    hold the texts it has (a prompt file is read only when the YAML names one)."""
    rows = list(ConfigDocument.objects.filter(pk=1, digest=digest, path=str(path)).values_list("document", flat=True))
    if not rows:
        return False
    files = (rows[0] or {}).get(global_prompts.PROMPT_FILES) or {}
    _prompt_files[str(path)] = global_prompts.watched(path, files)
    return global_prompts.files_current(path, files)


# The prompt files the applied document of each config path names: the
# writer's file watch looks at them beside the YAML (node/config_watch.py).
_prompt_files: dict[str, tuple[Path, ...]] = {}


def watched_prompt_files(path: Path) -> tuple[Path, ...]:
    """The prompt files of the document last read or applied for `path` here."""
    return _prompt_files.get(str(path), ())


PARSE_WAIT = 60.0  # seconds a process waits for another one's parse of the same bytes


@contextmanager
def _parsing(digest: str) -> Iterator[bool]:
    """One parse of a file's bytes at a time across the node's processes
    (both web processes and the tasks process sync the file at start: at
    20,000 backends each parse is seconds of CPU on the same cores). Yields
    whether it waited for another process that held it; then the caller
    looks whether that one applied it. Without Redis, or after PARSE_WAIT,
    it goes on alone (the DB lock still serialises the writes)."""
    lock = sync_client().lock(f"{settings.ROUTER_REDIS_PREFIX}config:parsing:{digest}", timeout=PARSE_WAIT, sleep=0.05)
    got = waited = False
    try:
        got = lock.acquire(blocking=False)
        waited = not got
        got = got or lock.acquire(blocking_timeout=PARSE_WAIT)
    except RedisError as exc:
        log.debug("config parse not shared (%s)", type(exc).__name__)
    try:
        yield waited
    finally:
        if got:
            with suppress(RedisError, LockError):
                lock.release()


def _apply(
    path: Path, text: bytes, digest: str, *, force: bool, incremental: bool,
    origin: config_history.Origin | None = None,
) -> bool:
    model, raw, tracked = _parse_read(path, text, remember=incremental)
    raw_backends = raw.get("backends") or []
    document = {k: v for k, v in raw.items() if k != "backends"}
    files = global_prompts.read_files(path, model.global_prompts)  # their texts go to the mirror, not their names
    if files:
        document[global_prompts.PROMPT_FILES] = files
    _prompt_files[str(path)] = global_prompts.watched(path, files)

    with transaction.atomic():
        doc, _ = ConfigDocument.objects.select_for_update().get_or_create(pk=1)
        if doc.digest == digest and doc.path == str(path) and doc.document == document and not force:
            return False
        backends = model.backends
        # The DB holds what this process applied last (same file, same
        # digest) and this parse started from that one: only the backends
        # it says changed need a look.
        last = _applied.get(str(path)) if incremental else None
        scope: set[str] | None = None
        if last is not None and tracked is not None and tracked.base == last.gen and not force \
                and doc.digest == last.digest and doc.path == str(path) \
                and len(tracked.gone) + len(tracked.added) <= _MAX_SCOPE:
            old = set(tracked.gone)
            new_names = {backends[i].name for i in tracked.added}
            scope = new_names | old
            new_names -= old  # renamed or added: not a config row yet
            wanted = {backends[i].name: (raw_backends[i], backends[i]) for i in tracked.added}
        if scope is None or len(scope) > _MAX_SCOPE:  # a large rewrite: compare everything (no huge IN lists)
            scope = None
            wanted = {b.name: (rb, b) for rb, b in zip(raw_backends, backends, strict=True)}
            new_names = set(wanted)
        others = Backend.objects.exclude(source=Source.CONFIG)
        if scope is not None:
            others = others.filter(name__in=list(new_names))
        foreign = new_names & set(others.values_list("name", flat=True))
        if foreign:
            raise ConfigError(
                f"{path}: backends: name(s) {sorted(foreign)} already belong to another "
                "source (admin or appproxy); rename them in the YAML"
            )
        touched = _write_config_backends(wanted, scope)
        if doc.document != document:
            touch(DOCUMENT, path.name)
        elif not touched:
            touch(NOTHING, path.name)  # comments, formatting: the same state under a new digest
        doc.path = str(path)
        doc.digest = digest
        doc.document = document
        doc.save()
        config_history.record(path, text, digest, origin)
        bump_revision(f"config {path.name}")
        if incremental and tracked is not None:
            applied = _Applied(digest, tracked.gen)
            transaction.on_commit(lambda: _applied.update({str(path): applied}))
        elif incremental:  # a whole-file parse: the next edit compares everything
            transaction.on_commit(lambda: _applied.pop(str(path), None))
    log.info("config applied", extra={"path": str(path), "backends": len(backends), "written": touched})
    return True


_MAX_SCOPE = 2000


@dataclass(frozen=True, slots=True)
class _Applied:
    """The last sync of one (split) file this process committed."""

    digest: str
    gen: int  # the parse it applied (config_schema.Tracked)


_applied: dict[str, _Applied] = {}  # config path → its last sync here


def _remember_applied(path: Path, digest: str) -> None:
    """The file is the one the DB holds (another process applied it, e.g. a
    web process at start): parse it once so the next edit is incremental."""
    last = _applied.get(str(path))
    if last is not None and last.digest == digest:
        return
    try:
        _, _, tracked = _parse_read(path, path.read_bytes(), remember=True, digest=digest)
    except (ConfigError, OSError):  # it changed since it was read: the next look applies it
        return
    if tracked is not None:
        _applied[str(path)] = _Applied(digest, tracked.gen)


def file_digest(text: bytes) -> str:
    """The digest the mirror keeps of a file's bytes (ConfigDocument.digest)."""
    return hashlib.sha256(_MIRROR_FORMAT + text).hexdigest()


class ConfigNotWritable(ConfigError):
    """No file of the operator's to write (the demo config), or it cannot be written."""


def writable_config_path() -> Path:
    path = resolve_config_path()
    if path.resolve() == DEMO_CONFIG.resolve():
        raise ConfigNotWritable(
            "no config file is configured (the demo config is in use): set ROUTER_CONFIG to the YAML to manage"
        )
    return path


def config_check(text: bytes, path: Path | None = None) -> None:
    """Validate a whole YAML text as `config_sync` would apply it, changing
    nothing; ConfigError (one line per problem, each naming its key) when
    it would be refused."""
    path = path or resolve_config_path()
    model, _raw, _ = _parse_read(path, text, remember=False)
    names = [b.name for b in model.backends]
    foreign = set(Backend.objects.exclude(source=Source.CONFIG).filter(name__in=names).values_list("name", flat=True))
    if foreign:
        raise ConfigError(
            f"{path}: backends: name(s) {sorted(foreign)} already belong to another "
            "source (admin or appproxy); rename them in the YAML"
        )


def _write_atomically(path: Path, data: bytes) -> None:
    """The new bytes under the path in one rename: the file watch sees the
    old file or the new one, never a half-written one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def config_write(
    text: bytes, *, origin: config_history.Origin, expected: int | None = None,
    also: Callable[[int | None], None] | None = None,
) -> int | None:
    """Make `text` the config: validate it, write it to the config file
    atomically and apply it, in one transaction with the version check.

    ``expected``: the version the caller based its change on; another
    version by now → VersionConflict (nothing written). Returns the version
    now current (the same one when `text` is what the mirror holds already).
    The file watch of the tasks process then finds these bytes applied. An
    apply that fails puts the previous file back."""
    path = writable_config_path()
    config_check(text, path)
    digest = file_digest(text)
    with _parsing(digest):
        old = path.read_bytes() if path.exists() else None
        written = False
        try:
            with transaction.atomic():
                # The document row's lock (PostgreSQL; SQLite's write lock is
                # taken at BEGIN) makes the check and the write one step:
                # of two writers based on one version exactly one wins.
                ConfigDocument.objects.select_for_update().get_or_create(pk=1)
                current = config_history.latest_number()
                if expected is not None and expected != current:
                    raise config_history.VersionConflict(current)
                _write_atomically(path, text)
                written = True
                _apply(path, text, digest, force=False, incremental=False, origin=origin)
                now = config_history.latest_number()
                if also is not None:
                    also(now)
                return now
        except BaseException:
            if written:  # the mirror kept the previous state: so does the file
                with suppress(OSError):
                    if old is None:
                        path.unlink()
                    else:
                        _write_atomically(path, old)
            raise


def _parse_read(path: Path, text: bytes, *, remember: bool, digest: str | None = None):
    """Parse the very bytes that were digested (a second read could see a
    newer file under the older digest). A missing file is load()'s error."""
    if not path.exists():
        return (*load(path), None)
    if digest is not None and hashlib.sha256(_MIRROR_FORMAT + text).hexdigest() != digest:
        raise ConfigError(f"{path}: changed while being read")
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if "\r" in decoded:  # as a text-mode read (universal newlines) would give it
        decoded = decoded.replace("\r\n", "\n").replace("\r", "\n")
    return parse_tracked(decoded, source=str(path), remember=remember)


def _write_config_backends(wanted: dict[str, tuple[dict, Any]], scope: set[str] | None = None) -> int:
    """Make the `config` Backend rows equal `wanted` (name → (raw, parsed)),
    writing only the rows that differ; returns how many were written. With
    ``scope``, only those names are compared (the rest are known equal)."""
    rows_q = Backend.objects.filter(source=Source.CONFIG)
    if scope is not None:
        rows_q = rows_q.filter(name__in=list(scope))
    rows = {row.name: row for row in rows_q}
    gone = [name for name in rows if name not in wanted]
    now = timezone.now()
    added: list[dict[str, Any]] = []
    changed: list[Backend] = []
    for name in wanted if scope is None else (n for n in scope if n in wanted):
        rb, parsed = wanted[name]
        fields = _backend_fields(rb, parsed)
        row = rows.get(name)
        discovered = ((row.extra if row is not None else None) or {}).get("discovered")
        if parsed.discover_models and discovered:
            fields["extra"]["discovered"] = discovered
        if row is None:
            added.append({"name": name, "source": Source.CONFIG, **fields})
        elif any(getattr(row, k) != v for k, v in fields.items()):
            for k, v in fields.items():
                setattr(row, k, v)
            row.updated_at = now
            changed.append(row)
    if gone:
        Backend.objects.filter(source=Source.CONFIG, name__in=gone).delete()
    insert_rows(Backend, added)  # a first sync of a 20,000-backend file adds them all
    Backend.objects.bulk_update(changed, [*_FIELDS, "updated_at"], batch_size=500)
    names = [*gone, *(b["name"] for b in added), *(b.name for b in changed)]
    touch(BACKEND, *names)
    return len(names)


def discovered_models_apply(found: dict[str, list[str]]) -> bool:
    """Store the model names probes found on `discover_models` backends.

    Bumps the revision only when a backend's list actually changed.
    """
    changed = False
    with transaction.atomic():
        for row in Backend.objects.select_for_update().filter(name__in=list(found)):
            extra = dict(row.extra or {})
            if not extra.get("discover_models") or extra.get("discovered") == found[row.name]:
                continue
            extra["discovered"] = found[row.name]
            row.extra = extra
            row.save(update_fields=["extra", "updated_at"])
            touch(BACKEND, row.name)
            changed = True
        if changed:
            bump_revision("discovered models")
    return changed
