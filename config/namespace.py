"""The Redis namespace of a deployment, derived without Django.

A deployment is one routing database: the nodes that share it share routing
state, so they share the Redis namespace (change notices, health verdicts,
recent requests, cluster rate limits). Two routers with distinct databases on
one Redis must never read each other's keys, so the default prefix carries a
fingerprint of the database location — stable across restarts, unique per
database, and free of credentials (only engine, host, port and name are
hashed). An explicit ROUTER_REDIS_PREFIX always wins.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _digest(*parts: object) -> str:
    return hashlib.sha256("\0".join(str(p) for p in parts).encode()).hexdigest()[:10]


def deployment_id(database: Mapping[str, Any]) -> str:
    """Fingerprint of a Django DATABASES entry (never its password)."""
    name = database.get("NAME") or ""
    if str(database.get("ENGINE", "")).endswith("sqlite3") and name and name != ":memory:":
        name = os.path.realpath(name)
    return _digest(database.get("ENGINE", ""), database.get("HOST", ""), database.get("PORT", ""), name)


def node_id(var_dir: Path) -> str:
    """Fingerprint of one node: its var dir (config, beat schedule, state)."""
    return _digest(os.path.realpath(var_dir))


def redis_prefix(environ: Mapping[str, str], deployment: str) -> str:
    explicit = environ.get("ROUTER_REDIS_PREFIX")
    return explicit if explicit else f"router:{deployment}:"
