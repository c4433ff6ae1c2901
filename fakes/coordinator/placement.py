"""Where a new inference circuit goes, and the URL it is reached at.

Invariants:
- An ``existing_url`` pins the circuit to the inference worker serving that
  host (and, on a port worker, that port), keeping its subdomain or port.
- Otherwise only ALIVE http workers that accept inference traffic qualify; a
  port worker also needs a free slot. Wildcard and ROUTER workers (no slot
  limit) come first, then the port worker with the most free slots; none is
  503 worker-not-available.
- A ROUTER circuit has neither port nor subdomain; its URL is the worker's
  one public base URL (``hostname`` and ``traffic_port``), BEP-1053.
- Subdomains are unique per worker (a clash gets a random suffix); a taken
  or exhausted port is 409 port-not-available.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from .bodies import CreateItem, CreateSingle
from .errors import invalid, port_not_available, worker_not_available
from .state import CoordinatorState, now_iso


def endpoint_url(circuit: Mapping[str, Any], worker: Mapping[str, Any]) -> str:
    tls = worker["tls_listen"] or worker["tls_advertised"]
    scheme = "https" if tls else "http"
    if circuit["frontend_mode"] == "port":
        return f"{scheme}://{worker['hostname']}:{circuit['port']}/"
    if circuit["frontend_mode"] == "router":
        port = worker.get("traffic_port") or worker["api_port"]
        default = (tls and port == 443) or (not tls and port == 80)
        return f"{scheme}://{worker['hostname']}{'' if default else f':{port}'}/"
    port = worker["wildcard_traffic_port"]
    suffix = "" if port is None or (tls and port == 443) or (not tls and port == 80) else f":{port}"
    return f"{scheme}://{circuit['subdomain']}{worker['wildcard_domain']}{suffix}/"


def pick_worker(state: CoordinatorState) -> dict[str, Any]:
    candidates = [
        w
        for w in state.workers.values()
        if w["status"] == "ALIVE"
        and w["protocol"] == "http"
        and "inference" in w["accepted_traffics"]
        and (w["frontend_mode"] in ("wildcard", "router") or w["available_slots"] - w["occupied_slots"] > 0)
    ]
    if not candidates:
        raise worker_not_available()
    # Unlimited (wildcard, router) workers first, then the port worker with the most free slots.
    candidates.sort(
        key=lambda w: (0, 0) if w["frontend_mode"] != "port" else (1, -(w["available_slots"] - w["occupied_slots"]))
    )
    return candidates[0]


def match_existing(state: CoordinatorState, url: str) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not host:
        raise invalid("URL is missing host component.")
    label, _, rest = host.partition(".")
    for w in state.workers.values():
        if (
            "inference" in w["accepted_traffics"]
            and w["frontend_mode"] == "wildcard"
            and w["wildcard_domain"] == "." + rest
        ):
            return w, {"subdomain": label}
    for w in state.workers.values():
        if (
            "inference" in w["accepted_traffics"]
            and w["frontend_mode"] == "port"
            and w["hostname"] == host
            and parts.port
            and w["port_range"]
            and w["port_range"][0] <= parts.port <= w["port_range"][1]
        ):
            return w, {"port": parts.port}
    for w in state.workers.values():
        if "inference" in w["accepted_traffics"] and w["frontend_mode"] == "router" and w["hostname"] == host:
            return w, {}
    return None, {}


def new_circuit(
    state: CoordinatorState,
    item: CreateItem | CreateSingle,
    endpoint_id: UUID,
    preferred: Mapping[str, Any],
    worker: dict[str, Any],
) -> dict[str, Any]:
    taken = state.worker_circuits(worker["id"])
    subdomain: str | None = None
    port: int | None = None
    if worker["frontend_mode"] == "router":
        pass  # no slot: neither subdomain nor port
    elif worker["frontend_mode"] == "wildcard":
        wanted = preferred.get("subdomain") or item.service_name
        used = {c["subdomain"] for c in taken}
        subdomain = wanted
        while subdomain in used:
            subdomain = f"{wanted}-{uuid.uuid4().hex[:8]}"
    else:
        lo, hi = worker["port_range"]
        free = sorted(set(range(lo, hi + 1)) - {c["port"] for c in taken})
        want = preferred.get("port")
        if (want is not None and want not in free) or not free:
            raise port_not_available()
        port = want if want is not None else free[0]
    now = now_iso()
    return {
        "id": str(uuid.uuid4()),
        "app": item.service_name,
        "protocol": "http",
        "worker": worker["id"],
        "app_mode": "inference",
        "frontend_mode": worker["frontend_mode"],
        "envs": {},
        "arguments": None,
        "open_to_public": item.open_to_public,
        "allowed_client_ips": None,
        "port": port,
        "subdomain": subdomain,
        "user_id": str(item.tags.session.user_uuid),
        "endpoint_id": str(endpoint_id),
        "runtime_variant": item.tags.endpoint.runtime_variant,
        "route_info": [],
        "session_ids": [],
        "created_at": now,
        "updated_at": now,
    }
