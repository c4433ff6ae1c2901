"""The audit log: who changed what, when, with digests of before and after.

`record` is called inside the transaction of the change it records, so an
entry exists exactly when its change committed. What goes in is an action
name, a target and digests (`digest_of`); never a secret: a key's entry
names its id and hint, a config entry the document digests.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from .models import AuditEntry


def digest_of(state: Any) -> str:
    """A stable SHA-256 of a JSON-able state ("" for None)."""
    if state is None:
        return ""
    return hashlib.sha256(orjson.dumps(state, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()


def record(actor: str, action: str, target: str = "", *, before: Any = None, after: Any = None,
           digests: tuple[str, str] | None = None, detail: dict[str, Any] | None = None) -> AuditEntry:
    """`before`/`after`: states to digest; or `digests`, when the change has
    its own (a config text's file digest)."""
    first, second = digests if digests is not None else (digest_of(before), digest_of(after))
    return AuditEntry.objects.create(
        actor=actor[:250], action=action, target=target[:300], before=first, after=second, detail=detail or {},
    )
