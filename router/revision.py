"""Revision bumps and change notices: the one write→read signal.

Writers call `bump_revision()` inside the transaction of their change. After
commit the new revision is published on Redis (`ROUTER_NOTICE_CHANNEL`), so
every web process updates its snapshot within milliseconds; a safety poll
covers a lost notice.

The change log: before bumping, a writer names what it wrote with
`touch(topic, name, ...)` (topics below; apps add their own, e.g. "key").
`bump_revision()` stores those names as the revision's `RoutingChange` rows,
and readers update their snapshot from them in place instead of compiling it
from scratch (router/selectors.py). A bump with nothing touched is stored as
the topic "*": readers then compile from scratch, so a writer that forgets to
touch is slow, never wrong. Touches are per thread and drained by the next
bump; one left behind by a rolled-back transaction only makes that bump name
a row that did not change (re-read, found equal: harmless).

A YAML edit the writer refused changes no revision; the writer leaves its
message under `config_error_key()` instead (router/config_watch.py), which
web processes read with their safety poll.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import transaction
from django.db.models import F

from .models import RoutingChange, RoutingRevision
from .redis import sync_client

log = logging.getLogger(__name__)

ALL = "*"  # unknown change: compile from scratch
NOTHING = "nothing"  # a revision that changed no mirror row (readers just re-install)
BACKEND = "backend"  # router.Backend, by name
DOCUMENT = "document"  # the applied YAML (ConfigDocument)

# More names than this in one revision are stored as ALL: compiling from
# scratch is then about as cheap as applying them, and the log stays small.
MAX_NAMES = 1000
# Change rows of revisions older than this many are pruned; a reader further
# behind compiles from scratch.
KEEP_REVISIONS = 5000
_PRUNE_EVERY = 256

_pending = threading.local()


def touch(topic: str, *names: str) -> None:
    """Name rows this thread is writing (in the transaction of the next bump);
    no names, nothing recorded."""
    if not names:
        return
    changes: dict[str, set[str]] | None = getattr(_pending, "changes", None)
    if changes is None:
        changes = _pending.changes = {}
    changes.setdefault(topic, set()).update(str(n) for n in names)


def pending_names(topic: str) -> set[str] | None:
    """The names of `topic` this thread's transaction wrote so far (empty:
    none; None: it wrote something it did not name)."""
    changes: dict[str, set[str]] = getattr(_pending, "changes", None) or {}
    if ALL in changes:
        return None
    return set(changes.get(topic, ()))


def _drain() -> list[tuple[str, str]]:
    changes: dict[str, set[str]] = getattr(_pending, "changes", None) or {}
    _pending.changes = {}
    pairs = [(topic, name) for topic, names in changes.items() for name in names]
    if not pairs or len(pairs) > MAX_NAMES or ALL in changes:
        return [(ALL, "")]
    return pairs


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
    """Increment the revision in the current transaction and log what this
    thread touched since the last bump; publish after commit."""
    pairs = _drain()
    with transaction.atomic():
        updated = RoutingRevision.objects.filter(pk=1).update(revision=F("revision") + 1, reason=reason[:200])
        if not updated:
            RoutingRevision.objects.get_or_create(pk=1, defaults={"revision": 1, "reason": reason[:200]})
        revision = current_revision()
        RoutingChange.objects.bulk_create(
            [RoutingChange(revision=revision, topic=topic, name=name[:300]) for topic, name in pairs]
        )
        if revision % _PRUNE_EVERY == 0:
            RoutingChange.objects.filter(revision__lte=revision - KEEP_REVISIONS).delete()
        transaction.on_commit(lambda: publish_notice(revision, reason))
    return revision


def changes_since(revision: int, until: int) -> dict[str, set[str]] | None:
    """{topic: names} of the revisions after `revision` up to `until`, or None
    when the log cannot say (pruned, a writer that named nothing, or more than
    compiling from scratch would cost)."""
    rows = list(
        RoutingChange.objects.filter(revision__gt=revision, revision__lte=until)
        .values_list("revision", "topic", "name")[: MAX_NAMES * 4 + 1]
    )
    if len(rows) > MAX_NAMES * 4 or {r for r, _, _ in rows} != set(range(revision + 1, until + 1)):
        return None
    changes: dict[str, set[str]] = {}
    for _, topic, name in rows:
        if topic == ALL:
            return None
        changes.setdefault(topic, set()).add(name)
    return changes


def config_error_key() -> str:
    """The message of the YAML file the writer last refused (absent once applied)."""
    return settings.ROUTER_REDIS_PREFIX + "config:error"


def publish_notice(revision: int, reason: str = "") -> None:
    try:
        sync_client().publish(settings.ROUTER_NOTICE_CHANNEL, str(revision))
    except Exception as exc:  # the safety poll still picks the change up
        log.warning("change notice not published (%s); web processes will poll", type(exc).__name__)
