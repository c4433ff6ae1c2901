"""The legacy worker's own part of `manage.py doctor` (appproxy/doctor.py
runs it after the checks every mode shares): the wildcard domain resolves.

Nothing is registered or written.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator

from node.doctor import Context, Result, fail, ok

from .config import AppProxySettings

__all__ = ["wildcard"]


def wildcard(ctx: Context, settings: AppProxySettings) -> Iterator[Result]:
    """A random label under ``wildcard_domain`` resolves."""
    host = f"doctor-{uuid.uuid4().hex[:8]}{settings.wildcard_domain}"
    started = time.monotonic()
    try:
        answers = socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError) as exc:
        yield fail(
            "appproxy.wildcard",
            f"*{settings.wildcard_domain} does not resolve ({host}: {exc})",
            f"add a wildcard DNS record *{settings.wildcard_domain} pointing at this node",
        )
        return
    address = answers[0][4][0] if answers else "?"
    ms = (time.monotonic() - started) * 1000
    yield ok("appproxy.wildcard", f"*{settings.wildcard_domain} resolves ({host} → {address}, {ms:.0f} ms)")
