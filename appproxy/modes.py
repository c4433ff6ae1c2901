"""The AppProxy modes (appproxy/mode.py says what each provides), and which
one this node runs: the legacy wildcard worker (``appproxy``) or the ROUTER
worker (``appproxy_router``), never both (the router's document validator
refuses that).

This is the one module of the shared code that imports the mode packages:
the shared processes (tasks, worker, subscriber, events, apps, doctor) reach
a mode only through ``MODES`` and ``of``. A new mode is a new package with a
``mode.py`` building its ``Mode``, added to ``MODES`` and ``Settings`` here.

``active_settings()`` is what the tasks and events processes run on: the
enabled section, else whichever section is present (disabled), else None
(in the order of ``MODES``). Every settings class exposes the attributes the
shared worker code reads (``mode``, ``authority``, ``coordinator_url``,
``api_secret``, intervals, ``bus_url()``, ``ack_format()`` …).
"""

from __future__ import annotations

from typing import Any

from .legacy.config import AppProxySettings
from .legacy.mode import MODE as LEGACY
from .mode import Mode
from .router_mode.config import RouterSettings
from .router_mode.mode import MODE as ROUTER

__all__ = ["MODES", "Settings", "active_settings", "of"]

MODES: tuple[Mode, ...] = (LEGACY, ROUTER)
Settings = AppProxySettings | RouterSettings

_BY_NAME = {mode.name: mode for mode in MODES}


def of(settings: Any) -> Mode:
    """The mode whose section `settings` is."""
    return _BY_NAME[settings.mode]


def active_settings() -> Settings | None:
    present = None
    for mode in MODES:
        s = mode.load_settings()
        if s is not None and s.enabled:
            return s
        if present is None:
            present = s
    return present
