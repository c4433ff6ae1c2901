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

ROUTER frontend mode (BEP-1053; contract ``shared/reference/router-mode.md``
§§1.1-1.4, 2.3):

- registration: ``PUT /api/worker`` with ``frontend_mode: "router"``,
  ``traffic_port`` (0/absent = api_port) and ``node_id``; the slot fields
  must be null and ``node_id`` present, else 400. Every node of an authority
  gets the same worker id. Liveness is per node (node_id → last_seen, TTL =
  heartbeat_timeout): PATCH with ``{"node_id"}`` (or ``?node_id=``)
  refreshes one node, DELETE with it drops only that node, GET shows
  ``nodes: [{node_id, last_seen}]`` of the live ones and no slots; the worker
  is LOST only when no node is live. A ROUTER worker and a stock inference
  worker never share one coordinator (400 on the second registration);
- circuits: placement treats a ROUTER worker like a wildcard one (no slot
  limit) but gives its circuits neither port nor subdomain; their URL is the
  worker's one base URL (``hostname``, ``traffic_port``);
- snapshot: ``GET /api/worker/{id}/router-config?known_revision=r`` is 304
  (empty) when ``r`` is the authority's revision, else 200 ``{revision (str),
  models, api_keys}``; answers are counted per worker;
- Manager API ``/v2/routers/{authority}/models[/{model}]`` and
  ``…/api-keys[/{key_id}]`` (GET, PUT, DELETE ``[?strict=true]``): one
  revision per authority bumped with each mutation; names unique across
  primaries and aliases; keys only as ``token_hash`` (a ``token`` is 400) and
  never listed with it;
- events: ``appproxy_router_{model,key}_{updated,removed}_event`` in the
  configured format (the fake's own codec); each mutation waits
  ``ack_timeout`` for the first ``appproxy_worker_router_config_applied_event``
  (either format, 3 or 4 args) and still succeeds on timeout with
  ``propagation: "deferred"``; a strict DELETE waits for every live node and
  reports ``unconfirmed_nodes``.

Both circuit shapes are served: the seed's, and the refined BEP-1053's when
a bulk routes call gives ``replica_groups`` (``[{id, traffic_weight,
lifecycle}]``, then on the circuit) and routes their ``replica_group_id``
and ``traffic_ratio`` (a route without a group keeps the seed's shape).

Test-only knobs (also over HTTP under ``/_test/``): change a route's
traffic_ratio without an event, suppress the next N events (a suppressed
``created`` or ROUTER event is not waited for), inspect workers/circuits/
events/acks; for ROUTER mode, ``GET /_test/router`` (per-authority state
without hashes, live nodes, 200/304 counts, events, acks) and ``POST
/_test/router-spelling`` (serve the snapshot in the tolerated spellings:
kebab-case, ``publications``, ``api-keys``, numeric revision).

Not modelled: Traefik mode, app filters in worker choice, interactive
circuits, ``/v2/conf``, the anycast stream; for ROUTER mode, the Manager-side
endpoint check of mappings, ``strategy-managed`` edit refusal, Prometheus
per-node metrics and the legacy node counter next to the live set.

Modules: ``state`` (what is remembered, LOST checks), ``errors`` (§1.5
bodies), ``auth`` (the token check and error rendering), ``bodies`` (request
models, JSON in and out), ``placement`` (worker choice, URLs), ``worker_api``,
``manager_api`` (incl. the ack wait), ``events`` (Pub/Sub out and acks in),
``router_state`` (ROUTER publications, keys, revision and nodes),
``router_api`` (router-config and ``/v2/routers``), ``router_events`` (the
ROUTER codec, acks and ack waits), ``testing`` (``/_test/*``), ``server``
(``make_app``, ``FakeCoordinator``), ``cli`` (``python -m fakes.coordinator``:
serve) and ``router_cli`` (``… router …`` / ``… endpoint …``: drive a running
fake).
"""

from .cli import main as main
from .server import FakeCoordinator, make_app
from .state import CONFIG_KEY, STATE_KEY, CoordinatorState
from .state import check_lost_workers as check_lost_workers

# As before, ``check_lost_workers`` and ``main`` are importable but not in __all__.
__all__ = ["CONFIG_KEY", "STATE_KEY", "CoordinatorState", "FakeCoordinator", "make_app"]
