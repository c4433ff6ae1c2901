"""Whose files a request sees: its API key's, or the anonymous pool's.

The owner is the admitted key's record id ("operator:<pk>",
"coordinator:<key_id>"); an open router's callers without a valid key are
all the anonymous owner "" — one pool they share (docs/files.md).
"""

from __future__ import annotations

from typing import Any

from router.core.errors import NotFound

ANONYMOUS = ""


def owner_of(caller: Any) -> str:
    """`caller` is an admission.Caller. A circuit host (AppProxy) serves one
    model and no files: 404."""
    if caller.pinned is not None:
        raise NotFound("Files are not served on an application host.")
    return caller.key.id if caller.key is not None else ANONYMOUS
