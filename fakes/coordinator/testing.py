"""Test-only knobs, also served over HTTP under ``/_test/``.

- ``GET /_test/state``: a copy of workers, circuits, endpoints, events, acks,
  drop reasons and the suppress count.
- ``POST /_test/traffic-ratio``: change one stored route's ``traffic_ratio``
  (by circuit or endpoint id) without an event, unless ``emit`` asks for a
  ``route_updated``.
- ``POST /_test/suppress``: suppress the next ``count`` events (recorded,
  never sent; a suppressed ``created`` or ROUTER event is not waited for).
- ``GET /_test/router``: ROUTER state per authority (revision, models, keys
  without hashes, live nodes), router-config 200/304 counts per worker id,
  ROUTER events and acks, and the spelling knob.
- ``POST /_test/router-spelling`` ``{"alt": true}``: serve router-config in
  the tolerated spellings (kebab-case, ``publications``, ``api-keys``,
  numeric revision); ``{"alt": false}`` restores snake_case.

They sit behind the same auth as the real API.
"""

from __future__ import annotations

import copy
from typing import Any

from aiohttp import web

from .bodies import Model, json_response, parse
from .errors import invalid, not_found
from .events import publish_route_update
from .manager_api import circuit_for_endpoint
from .state import STATE_KEY, CoordinatorState, now_iso, snapshot


def set_traffic_ratio(
    state: CoordinatorState, endpoint_or_circuit_id: str, route_id: str, ratio: float
) -> dict[str, Any]:
    """Change one stored route's traffic_ratio (no event); returns the circuit copy."""
    key = str(endpoint_or_circuit_id).lower()
    with state.lock:
        circuit = state.circuits.get(key)
        if circuit is None:
            circuit = circuit_for_endpoint(state, key)
        for route in circuit["route_info"]:
            if route.get("route_id") == str(route_id).lower():
                route["traffic_ratio"] = float(ratio)
                circuit["updated_at"] = now_iso()
                return copy.deepcopy(circuit)
    raise not_found("route")


class RatioKnob(Model):
    endpoint_id: str | None = None
    circuit_id: str | None = None
    route_id: str
    traffic_ratio: float
    emit: bool = False


class SuppressKnob(Model):
    count: int = 1


class SpellingKnob(Model):
    alt: bool = True


async def knob_state(request: web.Request) -> web.Response:
    return json_response(snapshot(request.app[STATE_KEY]))


async def knob_ratio(request: web.Request) -> web.Response:
    params = await parse(request, RatioKnob)
    target = params.circuit_id or params.endpoint_id
    if not target:
        raise invalid("circuit_id or endpoint_id is required")
    circuit = set_traffic_ratio(request.app[STATE_KEY], target, params.route_id, params.traffic_ratio)
    if params.emit:
        await publish_route_update(request.app, circuit)
    return json_response(circuit)


async def knob_suppress(request: web.Request) -> web.Response:
    params = await parse(request, SuppressKnob)
    state = request.app[STATE_KEY]
    with state.lock:
        state.suppress += max(0, params.count)
        return json_response({"suppress": state.suppress})


async def knob_router(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    with state.lock:
        return json_response(state.router.view())


async def knob_router_spelling(request: web.Request) -> web.Response:
    params = await parse(request, SpellingKnob)
    state = request.app[STATE_KEY]
    with state.lock:
        state.router.alt_spelling = params.alt
    return json_response({"alt": params.alt})


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/_test/state", knob_state)
    router.add_post("/_test/traffic-ratio", knob_ratio)
    router.add_post("/_test/suppress", knob_suppress)
    router.add_get("/_test/router", knob_router)
    router.add_post("/_test/router-spelling", knob_router_spelling)
