"""What this process's last ROUTER pull applied, circuit by circuit (issue 13).

A pull that finds the circuits answer changed used to compare all of it with
the mirror under the reconcile lock: at 5,000 circuits, reading and parsing
every row and item took 0.7–1.6 s, and every coordinator event (a route
replace) waited that out. With this memo the pull compares only what can
have changed:

- the items whose bytes (orjson's dump of the parsed item, digested) differ
  from the ones this process applied last time, or that it did not apply;
- the circuits some other writer touched since (the change log's CIRCUIT
  names: the events process, another node on the same database);
- the circuits it applied that the answer no longer lists (removed).

Everything else is, by construction, as the last pull left it. The memo
is only trusted when the change log can say what changed since and names no
publication (a publication feeds every circuit's plan); a mirrored backend
changed by someone else counts as its circuit touched. Otherwise the pull
compares everything, as before. A memo lives in the process that
pulls (the tasks process) and is rebuilt by the next full comparison after
a restart.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from router.revision import BACKEND, changes_since

from ..backends import NAME_PREFIX
from ..models import CIRCUIT, PUBLICATION


def item_id(item: Any) -> str | None:
    """The circuit id of an answer item as the mirror keys it (the canonical
    UUID text, whatever form the item spells it in); None without a usable id."""
    if isinstance(item, dict):
        ident = item.get("id")
        if isinstance(ident, str):
            try:
                return str(uuid.UUID(ident))
            except ValueError:
                return None
    return None


def circuit_of(backend: str) -> str | None:
    """The circuit id in a mirrored backend's name (`appproxy-<uuid>-r<route>`,
    backends.backend_name); None for any other backend, whose changes feed no
    circuit's plan."""
    if backend.startswith(NAME_PREFIX) and backend[len(NAME_PREFIX) + 36 : len(NAME_PREFIX) + 38] == "-r":
        return backend[len(NAME_PREFIX) : len(NAME_PREFIX) + 36].lower()
    return None


def digest(item: Any) -> bytes:
    """Of the item's content, not its spelling: keys sorted, so a mirrored
    row's raw (PostgreSQL's jsonb keeps no key order) digests as the answer
    item it was written from (services._baseline compares the two)."""
    return hashlib.blake2b(orjson.dumps(item, option=orjson.OPT_SORT_KEYS), digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class Delta:
    """The part of an answer a pull must look at."""

    indices: list[int]  # the items to parse and compare (changed, new, touched, or without an id)
    gone: set[str]  # circuit ids the last pull applied that the answer no longer lists


@dataclass(frozen=True, slots=True)
class Applied:
    """The items of the last applied pull, and the revision it left."""

    revision: int
    digests: dict[str, bytes]  # circuit id → digest of its item

    def delta(self, ids: list[str | None], digests: list[bytes | None], current: int) -> Delta | None:
        """What of an answer (its items' ids and digests, in order) to compare,
        or None when only a whole comparison can say."""
        changes = changes_since(self.revision, current)
        if changes is None or PUBLICATION in changes:
            return None
        touched = changes.get(CIRCUIT, set()) | {
            cid for name in changes.get(BACKEND, ()) if (cid := circuit_of(name)) is not None
        }
        mine = self.digests
        indices = [
            i
            for i, (cid, d) in enumerate(zip(ids, digests, strict=True))
            if cid is None or cid in touched or mine.get(cid) != d
        ]
        listed = {cid for cid in ids if cid is not None}
        return Delta(indices, (mine.keys() | touched) - listed)


# The digest of a circuit the memo names but does not vouch for: equal to no
# item's, so the next pull compares it if the answer lists it, and removes it
# if the answer no longer does.
UNSURE = b""


def applied_after(
    previous: Applied | None,
    delta: Delta | None,
    ids: list[str | None],
    digests: list[bytes | None],
    unsure: Iterable[str],
    revision: int,
) -> Applied:
    """The memo once a pull applied `delta` of this answer (all of it when None).
    `unsure`: circuits it did not apply as the answer has them (an item that
    failed to parse; one a writer changed after the fetch): the next pull
    looks at them again, listed or not."""
    out = dict(previous.digests) if previous is not None and delta is not None else {}
    if delta is not None:
        for gone in delta.gone:
            out.pop(gone, None)
    for cid, d in zip(ids, digests, strict=True):
        if cid is not None and d is not None:
            out[cid] = d
    for cid in unsure:
        out[cid] = UNSURE
    return Applied(revision, out)


def digests_of(items: list[Any]) -> tuple[list[str | None], list[bytes | None]]:
    ids = [item_id(item) for item in items]
    return ids, [digest(item) if cid is not None else None for cid, item in zip(ids, items, strict=True)]
