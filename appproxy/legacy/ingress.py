"""Legacy Host ingress (seed §5.4, reference §5, LEG-5/6/7): Host → circuit.

``Ingress`` is built once per routing snapshot (appproxy/legacy/selectors.py) and
read by every /v1 request before the API-key gate (router/admission.py):

1. Host (port stripped, lower-cased, trailing dot dropped). The apex
   (wildcard_domain without its dot) and ``aggregation_hosts`` → None:
   plain model routing across every circuit. A Host outside the wildcard
   domain → None as well (this node also serves plain /v1 traffic).
2. Host minus the wildcard domain = subdomain → circuit; unknown → 404
   ``endpoint_not_found``, which never enters fallback.
3. ``allowed_client_ips`` → 403 (the IP check comes first, as upstream).
4. Private circuit → ``Authorization`` JWT, HS256 with ``jwt_secret``, ``id``
   == circuit id, ``exp`` checked → else 401.
5. → the circuit's canonical model, which pins the request; with no routes it
   falls through to that model's fallback chain, after 3-4, never instead.

Private means private on every path: a confined circuit (private, or with an
IP list) is reachable through its own Host only. Every other Host routes by
model name without its replicas (``confines``), and a name only confined
circuits serve is unknown there like a name nobody serves (the snapshot's
``hidden``), so its existence does not leak either.

Constant work per request: dict lookups and one HMAC; no DB, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from router.core.errors import ClientIpNotAllowed, EndpointNotFound, NoBackendAvailable
from router.core.ipnets import ip_allowed
from router.core.secret import Secret

from ..backends import NAME_PREFIX, circuit_scope
from .jwtauth import verify_circuit_token
from .plan import IngressEntry

__all__ = ["Ingress", "normalize_host"]


def normalize_host(value: str) -> str:
    """``Sub.Models.Example.com:443`` → ``sub.models.example.com``."""
    host = value.strip().lower()
    if host.startswith("["):  # an IPv6 literal, maybe with a port
        return host.split("]", 1)[0] + "]"
    name, sep, port = host.rpartition(":")
    if sep and port.isdigit():
        host = name
    return host.rstrip(".")


@dataclass(frozen=True, slots=True)
class Ingress:
    domain: str  # ".models.example.com"
    aggregate_hosts: frozenset[str]  # the apex and aggregation_hosts
    table: Mapping[str, IngressEntry]  # subdomain (lower-case) → entry
    jwt_secret: Secret = field(repr=False)
    # plan.confinement: the backend-name prefixes of the confined circuits'
    # replicas, and the model names those circuits serve.
    confined: frozenset[str] = frozenset()
    confined_models: frozenset[str] = frozenset()
    # Readiness and status facts, as of the snapshot's compile.
    authority: str = ""
    worker_id: str = ""
    registered: bool = False
    first_pull_applied: bool = False

    def __repr__(self) -> str:
        return f"<Ingress {self.domain} circuits={len(self.table)}>"

    def confines(self, backend: str) -> bool:
        """Whether a backend is a confined circuit's replica, which only a
        request through that circuit's Host (scoped to it) may use."""
        if not self.confined or not backend.startswith(NAME_PREFIX):
            return False
        # appproxy-<circuit id>-r<route key>: each "-r" is tried as the end of
        # the prefix, so no shape of circuit id or route key is assumed.
        at = backend.find("-r", len(NAME_PREFIX))
        while at != -1:
            if backend[: at + 2] in self.confined:
                return True
            at = backend.find("-r", at + 1)
        return False

    def circuit_for(self, host: str) -> IngressEntry | None:
        """The entry a Host names; None when it is not a circuit host."""
        name = normalize_host(host)
        if not name or name in self.aggregate_hosts or not name.endswith(self.domain):
            return None
        sub = name[: -len(self.domain)]
        entry = self.table.get(sub)
        if entry is None:
            shown = name if len(name) <= 253 else name[:250] + "…"
            raise EndpointNotFound(f"No endpoint is registered for the host '{shown}'.")
        return entry

    def resolve(self, env: Any, snap: Any = None) -> str | None:
        """The model to pin, or None for plain routing; raises 404/403/401/503."""
        target = self.resolve_target(env, snap)
        return None if target is None else target[0]

    def resolve_target(self, env: Any, snap: Any = None) -> tuple[str, str] | None:
        """(model, backend-name prefix of the circuit's own replicas), or None.

        The pipeline keeps a circuit host's traffic on that circuit's replicas:
        two endpoints that serve the same model name never share replicas.
        """
        entry = self.circuit_for(env.host)
        if entry is None:
            return None
        if entry.allowed_ips and not ip_allowed(entry.allowed_ips, env.client_ip):
            raise ClientIpNotAllowed("E20011: Client address not allowed.")
        if not entry.open_to_public:
            verify_circuit_token(
                env.headers.get("authorization"),
                circuit_id=entry.circuit_id,
                secret=self.jwt_secret,
            )
        if not entry.model:
            raise NoBackendAvailable(
                "This endpoint's model is not known yet: none of its replicas has answered /v1/models."
            )
        return entry.model, circuit_scope(entry.circuit_id)
