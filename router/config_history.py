"""The config's history: every applied YAML text is a numbered version.

Invariants:
- A version is recorded in the transaction that applies its text to the
  mirror (router/services.py `_apply`), by whichever writer applied it, with
  that writer's `Origin` (the file watch: "file"; the admin API: "api"). No
  applied text is missing from the history, and none is in it unapplied.
- A text equal to the newest version's (same digest) is not a new version.
- The newest `settings.ROUTER_CONFIG_VERSIONS` (default 100) are kept.
- A rollback is a new version whose text is an old one's, written and applied
  like any other change (services.config_write).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from .models import ConfigDocument, ConfigVersion

SOURCES = ("file", "api", "dashboard")


@dataclass(frozen=True, slots=True)
class Origin:
    """Who a version is attributed to."""

    source: str = "file"
    actor: str = ""
    note: str = ""


FILE = Origin()


class VersionConflict(Exception):
    """The config changed since the version a writer based its change on."""

    def __init__(self, current: int | None) -> None:
        self.current = current
        super().__init__(f"the config is at version {current}")


def latest() -> ConfigVersion | None:
    return ConfigVersion.objects.order_by("-number").first()


def latest_number() -> int | None:
    return ConfigVersion.objects.order_by("-number").values_list("number", flat=True).first()


def record(path: Path, text: bytes, digest: str, origin: Origin | None) -> ConfigVersion | None:
    """Add a version for an applied text (call inside its transaction)."""
    last = latest()
    if last is not None and last.digest == digest:
        return None
    origin = origin or FILE
    version = ConfigVersion.objects.create(
        number=(last.number + 1) if last else 1, source=origin.source, actor=origin.actor[:250],
        note=origin.note[:200], path=str(path), digest=digest, text=text.decode("utf-8", errors="replace"),
    )  # fmt: skip
    keep = max(1, int(getattr(settings, "ROUTER_CONFIG_VERSIONS", 100)))
    ConfigVersion.objects.filter(number__lte=version.number - keep).delete()
    return version


def seed(path: Path, text: bytes, digest: str) -> None:
    """A mirror applied before versions existed: its text becomes version 1
    (only when the DB holds exactly these bytes of this path)."""
    if ConfigVersion.objects.exists():
        return
    if ConfigDocument.objects.filter(pk=1, digest=digest, path=str(path)).exists():
        record(path, text, digest, Origin("file", note="the config applied before versions were kept"))
