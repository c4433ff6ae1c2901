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
touch is slow, never wrong. A topic with more names than MAX_NAMES in one
bump (a first pull: 20,000 backends) is stored as that topic's name "*":
"every row of the topic". The snapshot reader then re-reads that topic
whole and keeps every part the bump did not touch (the 100,000-key keyring);
other readers of the log see no names they could apply and compare
everything, as for "*". Touches are per thread and drained by the next
bump; one left behind by a rolled-back transaction only makes that bump name
a row that did not change (re-read, found equal: harmless).

A YAML edit the writer refused changes no revision; the writer leaves its
message under `config_error_key()` instead (node/config_watch.py), which
web processes read with their safety poll.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Collection
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from .bulk import insert_rows
from .models import RoutingChange, RoutingRevision
from .redis import sync_client

log = logging.getLogger(__name__)

ALL = "*"  # as a topic: unknown change, compile from scratch; as a name: every row of its topic
NOTHING = "nothing"  # a revision that changed no mirror row (readers just re-install)
BACKEND = "backend"  # router.Backend, by name
DOCUMENT = "document"  # the applied YAML (ConfigDocument)

# More names than this of one topic in one revision are stored as the
# topic's name ALL: re-reading the topic whole is then about as cheap as
# applying them, and the log stays small.
MAX_NAMES = 5000
# More change rows than this between two revisions: the reader compiles
# from scratch (reading and applying them would cost about as much).
MAX_ROWS = 20000
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


def forget_pending() -> None:
    """Drop the names this thread touched since its last bump: for a writer
    that gave its transaction up (its rows were not written), so that the
    next bump of this thread does not log them."""
    _pending.changes = {}


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
    if not changes or ALL in changes:
        return [(ALL, "")]
    return [
        (topic, name)
        for topic, names in changes.items()
        for name in (names if len(names) <= MAX_NAMES and ALL not in names else (ALL,))
    ]


@functools.cache
def _statements() -> tuple[str, str]:
    """The two reads every refresh of every web process makes, as plain SQL:
    the ORM spent ~0.3 ms of the interpreter compiling each (~0.6 ms of a
    1.3 ms refresh at cluster size), taken from the requests in flight."""
    q = connection.ops.quote_name
    rev, chg = RoutingRevision._meta, RoutingChange._meta

    def col(meta: Any, name: str) -> str:
        return q(meta.get_field(name).column)

    return (
        f"SELECT {col(rev, 'revision')} FROM {q(rev.db_table)} WHERE {q(rev.pk.column)} = 1",
        f"SELECT {col(chg, 'revision')}, {col(chg, 'topic')}, {col(chg, 'name')} FROM {q(chg.db_table)} "
        f"WHERE {col(chg, 'revision')} > %s AND {col(chg, 'revision')} <= %s LIMIT {MAX_ROWS + 1}",
    )


def current_revision() -> int:
    with connection.cursor() as cursor:
        cursor.execute(_statements()[0])
        row = cursor.fetchone()
    return int(row[0]) if row else 0


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
        # plain rows: a first pull logs ~30,000 names, and bulk_create
        # compiled each (router.bulk)
        insert_rows(RoutingChange, ({"revision": revision, "topic": topic, "name": name[:300]} for topic, name in pairs))
        if revision % _PRUNE_EVERY == 0:
            RoutingChange.objects.filter(revision__lte=revision - KEEP_REVISIONS).delete()
        transaction.on_commit(lambda: publish_notice(revision, reason))
    return revision


def changes_since(revision: int, until: int, *, whole: bool = False) -> dict[str, set[str]] | None:
    """{topic: names} of the revisions after `revision` up to `until`, or None
    when the log cannot say (pruned, a writer that named nothing, or more than
    compiling from scratch would cost). A topic some revision changed whole
    makes it None too, unless `whole`: then its names are {ALL} (`is_whole`)."""
    with connection.cursor() as cursor:
        cursor.execute(_statements()[1], [revision, until])
        rows = cursor.fetchall()
    if len(rows) > MAX_ROWS or {r for r, _, _ in rows} != set(range(revision + 1, until + 1)):
        return None
    changes: dict[str, set[str]] = {}
    wholly: set[str] = set()
    for _, topic, name in rows:
        if topic == ALL or (name == ALL and not whole):
            return None
        if name == ALL:
            wholly.add(topic)
        changes.setdefault(topic, set()).add(name)
    for topic in wholly:
        changes[topic] = {ALL}
    return changes


def is_whole(names: Collection[str]) -> bool:
    """A topic's names from changes_since(…, whole=True): every row of it may have changed."""
    return ALL in names


def config_error_key() -> str:
    """The message of the YAML file the writer last refused (absent once applied)."""
    return settings.ROUTER_REDIS_PREFIX + "config:error"


def publish_notice(revision: int, reason: str = "") -> None:
    try:
        sync_client().publish(settings.ROUTER_NOTICE_CHANNEL, str(revision))
    except Exception as exc:  # the safety poll still picks the change up
        log.warning("change notice not published (%s); web processes will poll", type(exc).__name__)
