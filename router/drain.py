"""Draining a backend: an operator's "no new requests" switch
(`Backend.drained`), written through the one writer path.

A drain changes routing like any other write: the row is updated, the
backend is named in the change log (`touch(BACKEND, name)`) and the revision
bumped in one transaction, so every web process of the cluster gets the
flag in its next snapshot (`BackendSpec.drained`) and selection stops
picking the backend (router/core/selection.py). Requests already running on
it keep their slot and finish; its health probe keeps running, so an undrain
finds its verdict current.

The flag belongs to no source: the YAML sync and the AppProxy reconcile
write their own columns only, so a reload keeps a drain for as long as the
row lives (a backend removed from its source and added again starts
undrained).
"""

from __future__ import annotations

from django.db import transaction

from .models import Backend
from .revision import BACKEND, bump_revision, touch


class UnknownBackend(LookupError):
    """No backend of that name in the mirror."""


def backend_drain(name: str, *, drained: bool) -> bool:
    """Set `name`'s drain; True when that changed it (an unchanged flag
    bumps nothing). Call inside the caller's transaction to record the
    change beside it (the admin API's audit entry)."""
    with transaction.atomic():
        row = Backend.objects.select_for_update().filter(name=name).only("pk", "drained").first()
        if row is None:
            raise UnknownBackend(name)
        if row.drained == drained:
            return False
        Backend.objects.filter(pk=row.pk).update(drained=drained)
        touch(BACKEND, name)
        bump_revision(f"{'drain' if drained else 'undrain'} {name}")
    return True
