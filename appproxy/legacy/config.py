"""The ``appproxy`` section of the router YAML: the legacy wildcard worker.

Invariants:
- The keys shared with every mode (the coordinator, the bus, the intervals)
  and how they validate are ``config.WorkerSettings``; this section adds
  ``jwt_secret``, ``frontend_mode``, ``wildcard_domain``,
  ``aggregation_hosts``, ``wildcard_traffic_port`` and ``discovery_timeout``.
- Only the wildcard frontend mode exists (PORT mode needs a listener per
  circuit); ``wildcard_domain`` is normalised to a lower-case name with one
  leading dot (``*.x`` and ``x`` are accepted).
- ``load_settings()`` reads the section from the applied document (never the
  file), re-parsed only when its digest changes (``config.load_cached``).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field, field_validator

from router.core.secret import Secret

from ..config import (
    Duration,
    SecretValue,
    WorkerSettings,
    as_section_validator,
    load_cached,
    parse_model,
    strip_userinfo,
)

__all__ = ["AppProxySettings", "load_settings", "parse_section", "validate_section"]

_HOST = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")


def _host(value: str) -> str:
    """Lower-case, without a port or a trailing dot."""
    host = value.strip().lower().rstrip(".")
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    name, sep, port = host.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        host = name
    return host


class AppProxySettings(WorkerSettings):
    """One validated ``appproxy`` section (the legacy wildcard worker)."""

    REQUIRED: ClassVar[tuple[str, ...]] = (
        "coordinator_url", "api_secret", "jwt_secret", "authority", "hostname", "wildcard_domain",
    )  # fmt: skip

    jwt_secret: SecretValue = Secret("")  # HS256 key of private circuits' tokens
    frontend_mode: str = "wildcard"
    wildcard_domain: str = ""
    aggregation_hosts: tuple[str, ...] = ()
    wildcard_traffic_port: int | None = Field(default=None, ge=1, le=65535)
    discovery_timeout: Duration = 2.0  # GET <replica>/v1/models

    @field_validator("frontend_mode")
    @classmethod
    def _mode(cls, v: str) -> str:
        if v != "wildcard":
            raise ValueError(
                "only 'wildcard' is supported (PORT mode needs a listener per circuit; "
                "use appproxy_router for the ROUTER mode)"
            )
        return v

    @field_validator("wildcard_domain")
    @classmethod
    def _domain(cls, v: str) -> str:
        if not v:
            return ""
        name = _host(v)
        if name.startswith("*."):
            name = name[1:]
        bare = name.lstrip(".")
        if not bare or not _HOST.match(bare):
            raise ValueError("must be a DNS name such as '.models.example.com'")
        return "." + bare

    @field_validator("aggregation_hosts", mode="before")
    @classmethod
    def _hosts(cls, v: Any) -> Any:
        if v is None:
            return ()
        if not isinstance(v, (list, tuple)):
            raise ValueError("must be a list of host names")
        out = []
        for item in v:
            if not isinstance(item, str) or not _host(item):
                raise ValueError("must be a list of host names")
            out.append(_host(item))
        return tuple(out)

    # -- derived ------------------------------------------------------------
    @property
    def mode(self) -> str:
        return "wildcard"

    @property
    def apex(self) -> str:
        """The wildcard domain without its leading dot: an aggregation host."""
        return self.wildcard_domain.lstrip(".")

    def registration_port(self) -> int:
        """``api_port``, else ``ROUTER_PORT``, else the traffic port, else 80."""
        if self.api_port:
            return self.api_port
        env = os.environ.get("ROUTER_PORT", "")
        if env.isdigit() and 0 < int(env) < 65536:
            return int(env)
        return self.wildcard_traffic_port or 80

    def public(self) -> dict[str, Any]:
        """Everything but the secrets (for /status and logs)."""
        return {
            "enabled": self.enabled,
            "coordinator_url": strip_userinfo(self.coordinator_url),
            "authority": self.authority,
            "hostname": self.hostname,
            "frontend_mode": self.frontend_mode,
            "wildcard_domain": self.wildcard_domain,
            "aggregation_hosts": list(self.aggregation_hosts),
            "wildcard_traffic_port": self.wildcard_traffic_port,
            "heartbeat_period_s": self.heartbeat_period,
            "reconcile_interval_s": self.reconcile_interval,
            "events_enabled": self.events_enabled,
            "event_format": self.event_format,
            "channel": self.channel,
        }


def parse_section(raw: Mapping[str, Any] | None, *, prefix: str = "appproxy") -> AppProxySettings | None:
    """The validated section (None when absent). Raises ValueError naming keys."""
    return parse_model(AppProxySettings, raw, prefix=prefix, section="appproxy")


validate_section = as_section_validator(parse_section, "appproxy_config")


_lock = threading.Lock()
_cache: dict[str, Any] = {"key": None, "value": None}


def load_settings() -> AppProxySettings | None:
    """The ``appproxy`` section of the applied YAML document, or None (see load_cached)."""
    return load_cached(_cache, _lock, "appproxy", parse_section)
