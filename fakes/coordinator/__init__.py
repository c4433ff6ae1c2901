"""A fake Backend.AI AppProxy coordinator for tests and local runs.

It behaves like the reference (``shared/reference/appproxy-protocol.md``) on
the parts a wildcard inference worker and the manager touch:

- auth (§1.2): ``X-BackendAI-Token`` equal to ``<api_secret>``, ``Bearer …`` or
  ``BackendAI …``; else ``Authorization: Bearer <jwt signed HS256 with
  api_secret>``; anything else is 401 AuthorizationFailed (§1.5 body);
- worker API (§1): PUT/PATCH/DELETE/GET ``/api/worker…`` and
  ``GET /api/worker/{id}/circuits``, snake_case bodies, re-register keeps the
  id, bumps ``nodes`` and never changes ``accepted_traffics``; unknown worker
  is 404 ``E00002: No such worker.``;
- manager API (§6): bulk create (commit first, then per new circuit: publish
  ``created`` and wait ``ack_timeout`` for an ack naming it, else 503
  ``E10001: Proxy worker not responding`` with the row kept; a re-send is 200
  with no new event), delete (removed event), bulk routes replace / register
  / unregister (route_updated with the full list; ratio 1.0, protocol http),
  health-check, token (HS256 with jwt_secret);
- events (§3) on the Pub/Sub channel in one configured format; acks in the
  other format, or whose circuits are not complete SerializableCircuits, are
  dropped like the real parser does;
- heartbeat (§7.1): only PATCH records ``last_seen``; a worker ALIVE with a
  ``last_seen`` older than ``heartbeat_timeout`` becomes LOST at the next
  check and gets no new circuits; the next PATCH revives it.

Test-only knobs (also over HTTP under ``/_test/``): change a route's
traffic_ratio without an event, suppress the next N events (a suppressed
``created`` is not waited for), inspect workers/circuits/events/acks.

Not modelled: Traefik mode, app filters in worker choice, interactive
circuits, ``/v2/conf``, the anycast stream.

Modules: ``state`` (what is remembered, LOST checks), ``errors`` (§1.5
bodies), ``auth`` (the token check and error rendering), ``bodies`` (request
models, JSON in and out), ``placement`` (worker choice, URLs), ``worker_api``,
``manager_api`` (incl. the ack wait), ``events`` (Pub/Sub out and acks in),
``testing`` (``/_test/*``), ``server`` (``make_app``, ``FakeCoordinator``),
``cli`` (``python -m fakes.coordinator``).
"""

from .cli import main as main
from .server import FakeCoordinator, make_app
from .state import CONFIG_KEY, STATE_KEY, CoordinatorState
from .state import check_lost_workers as check_lost_workers

# As before, ``check_lost_workers`` and ``main`` are importable but not in __all__.
__all__ = ["CONFIG_KEY", "STATE_KEY", "CoordinatorState", "FakeCoordinator", "make_app"]
