"""Which AppProxy mode this node runs: the legacy wildcard worker
(``appproxy``) or the ROUTER worker (``appproxy_router``), never both (the
router's document validator refuses that).

``active_settings()`` is what the tasks and events processes run on: the
enabled section, else whichever section is present (disabled), else None.
Both settings classes expose the attributes the shared worker code reads
(``mode``, ``authority``, ``coordinator_url``, ``api_secret``, intervals,
``bus_url()``, ``ack_format()`` …).
"""

from __future__ import annotations

from .config import AppProxySettings, load_settings
from .router_mode.config import RouterSettings, load_router_settings

__all__ = ["Settings", "active_settings"]

Settings = AppProxySettings | RouterSettings


def active_settings() -> Settings | None:
    legacy = load_settings()
    if legacy is not None and legacy.enabled:
        return legacy
    router = load_router_settings()
    if router is not None and router.enabled:
        return router
    return legacy or router
