"""Whose stored responses a request sees: its API key's, or the anonymous pool's.

The owner is the admitted key's record id ("operator:<pk>",
"coordinator:<key_id>"); an open router's callers without a valid key are
all the anonymous owner "" — one pool they share, reachable only by a
response's unguessable id (docs/responses.md).
"""

from __future__ import annotations

from typing import Any

ANONYMOUS = ""


def owner_of(caller: Any) -> tuple[str, str]:
    """(owner, owner name) of an admission.Caller."""
    key = caller.key
    if key is None:
        return ANONYMOUS, ""
    return key.id, getattr(key, "name", "") or ""
