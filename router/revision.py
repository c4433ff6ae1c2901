"""Revision bumps and change notices: the one write→read signal.

Writers call `bump_revision()` inside the transaction of their change. After
commit the new revision is published on Redis (`ROUTER_NOTICE_CHANNEL`), so
every web process recompiles its snapshot within milliseconds; a safety poll
covers a lost notice.

A YAML edit the writer refused changes no revision; the writer leaves its
message under `config_error_key()` instead (router/config_watch.py), which
web processes read with their safety poll.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.db.models import F

from .models import RoutingRevision
from .redis import sync_client

log = logging.getLogger(__name__)


def current_revision() -> int:
    row = RoutingRevision.objects.filter(pk=1).values_list("revision", flat=True).first()
    return int(row or 0)


def lock_revision() -> None:
    """Serialise mirror writers of every node sharing this database: holds the
    revision row's lock until the current transaction ends (PostgreSQL;
    SQLite serialises writers by itself and ignores it)."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("lock_revision() needs a transaction")
    if not RoutingRevision.objects.select_for_update().filter(pk=1).exists():
        RoutingRevision.objects.get_or_create(pk=1, defaults={"revision": 0, "reason": "created"})


def bump_revision(reason: str) -> int:
    """Increment the revision in the current transaction; publish after commit."""
    with transaction.atomic():
        updated = RoutingRevision.objects.filter(pk=1).update(revision=F("revision") + 1, reason=reason[:200])
        if not updated:
            RoutingRevision.objects.get_or_create(pk=1, defaults={"revision": 1, "reason": reason[:200]})
        revision = current_revision()
        transaction.on_commit(lambda: publish_notice(revision, reason))
    return revision


def config_error_key() -> str:
    """The message of the YAML file the writer last refused (absent once applied)."""
    return settings.ROUTER_REDIS_PREFIX + "config:error"


def publish_notice(revision: int, reason: str = "") -> None:
    try:
        sync_client().publish(settings.ROUTER_NOTICE_CHANNEL, str(revision))
    except Exception as exc:  # the safety poll still picks the change up
        log.warning("change notice not published (%s); web processes will poll", type(exc).__name__)
