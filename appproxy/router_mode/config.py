"""The ``appproxy_router`` section: the ROUTER-mode worker (seed §9.11).

Invariants:
- The keys are the seed's (``enabled``, ``coordinator_url``, ``api_secret``,
  ``redis_url``, ``authority``, ``hostname``, ``traffic_port``,
  ``tls_advertised``, ``heartbeat_period``, ``reconcile_interval``,
  ``events_enabled``) plus a few documented operational ones shared with the
  legacy section (``api_port``, ``tls_listen``, ``event_format``, ``channel``,
  ``request_timeout``, ``retry_backoff_max``, ``subscribe_grace``) and
  ``weighting`` (``flat``, the seed's rule and the default, or
  ``hierarchical``, the refined BEP-1053's: plan.py). Any other
  key — ``wildcard_domain``, ``jwt_secret``, ``frontend_mode``… — is a hard
  error naming it.
- ``api_secret`` is a ``Secret`` (prints ``***``); ``${ENV}`` in it and in
  ``redis_url`` is resolved by the router loader.
- ``traffic_port`` 0 or absent means "the api_port".
- Enabling both this and ``appproxy`` is refused by the router's document
  validator (router.config_schema).
- ``load_router_settings()`` reads the applied document (never the file),
  re-parsed only when its digest changes (``config.load_cached``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from ..config import WorkerSettings, as_section_validator, load_cached, parse_model, strip_userinfo

__all__ = [
    "RouterSettings",
    "load_router_settings",
    "parse_router_section",
    "validate_router_section",
    "weighting",
]


MODE = "router"


class RouterSettings(WorkerSettings):
    """One validated ``appproxy_router`` section. Secrets never print."""

    traffic_port: int | None = Field(default=None, ge=0, le=65535)
    # How route weights compose (plan.py): the flattened product, or the
    # per-level normalisation of the refined BEP-1053.
    weighting: Literal["flat", "hierarchical"] = "flat"

    # -- what the shared worker code reads ---------------------------------
    @property
    def mode(self) -> str:
        return MODE

    def registration_port(self) -> int:
        """``api_port``, else ``ROUTER_PORT``, else 80."""
        if self.api_port:
            return self.api_port
        env = os.environ.get("ROUTER_PORT", "")
        if env.isdigit() and 0 < int(env) < 65536:
            return int(env)
        return 80

    def advertised_traffic_port(self) -> int:
        """``traffic_port``; 0 or absent = the api_port."""
        return self.traffic_port or self.registration_port()

    def public(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "mode": MODE,
            "coordinator_url": strip_userinfo(self.coordinator_url),
            "authority": self.authority,
            "hostname": self.hostname,
            "api_port": self.registration_port(),
            "traffic_port": self.advertised_traffic_port(),
            "tls_advertised": self.tls_advertised,
            "heartbeat_period_s": self.heartbeat_period,
            "reconcile_interval_s": self.reconcile_interval,
            "events_enabled": self.events_enabled,
            "weighting": self.weighting,
            "event_format": self.event_format,
            "channel": self.channel,
        }


def parse_router_section(raw: Mapping[str, Any] | None, *, prefix: str = "appproxy_router") -> RouterSettings | None:
    return parse_model(RouterSettings, raw, prefix=prefix, section="appproxy_router")


validate_router_section = as_section_validator(parse_router_section, "appproxy_router_config")

_lock = threading.Lock()
_cache: dict[str, Any] = {"key": None, "value": None}


def load_router_settings() -> RouterSettings | None:
    """The ``appproxy_router`` section of the applied document, or None (see config.load_cached)."""
    return load_cached(_cache, _lock, "appproxy_router", parse_router_section)


def weighting() -> str:
    """``appproxy_router.weighting`` of the applied document (flat without one)."""
    settings = load_router_settings()
    return settings.weighting if settings is not None else "flat"
