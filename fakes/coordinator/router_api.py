"""ROUTER mode REST (BEP-1053): the worker snapshot and the Manager's API.

Worker side:
- ``GET /api/worker/{id}/router-config?known_revision=r``: 304 with an empty
  body when ``r`` is the authority's current revision, else 200
  ``{"revision": "<str>", "models": […], "api_keys": […]}`` (router-mode.md
  §1.2; the ``alt_spelling`` knob emits kebab-case, ``publications``,
  ``api-keys`` and a numeric revision). Every answer is counted per worker.
  A stock worker is 400; an unknown one 404.

Manager side (same auth as ``/v2/endpoints``), per authority:
- ``GET|PUT|DELETE /v2/routers/{authority}/models[/{model}]`` and
  ``GET|PUT|DELETE /v2/routers/{authority}/api-keys[/{key_id}]``.
- A mutation validates (400: name clash across primaries and aliases, ratio
  < 0 or not finite, token_hash not 64 lowercase hex, a plaintext ``token``),
  stores and bumps the revision in one locked step, then publishes its event
  and waits ``ack_timeout`` for the first ack. It succeeds either way:
  ``{"success": true, "revision": n, "propagation": "acked"|"deferred",
  "acked_by": node_id|null}``.
- DELETE of a missing entity is idempotent: 200, no bump, no event,
  ``propagation: "none"``. ``?strict=true`` waits for an ack from every live
  node (bounded by the same timeout) and adds ``unconfirmed_nodes``.
- Listings never return ``token_hash``; keys show ``display_hint``.
- Authorities need no registered worker: a Manager may publish first.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from .bodies import KeyBody, PublicationBody, json_response, load_json, validate
from .errors import invalid, not_found
from .router_events import KEY_REMOVED, KEY_UPDATED, MODEL_REMOVED, MODEL_UPDATED, publish_and_wait
from .state import CONFIG_KEY, STATE_KEY, check_router_workers

# -- worker side -------------------------------------------------------------


async def router_config(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    with state.lock:
        row = state.workers.get(request.match_info["worker_id"].lower())
        if row is None:
            raise not_found("worker")
        if row["frontend_mode"] != "router":
            raise invalid("router-config is served to ROUTER workers only")
        auth = state.router.of(row["authority"])
        known = request.query.get("known_revision")
        if known is not None and known == str(auth.revision):
            state.router.count_pull(row["id"], 304)
            return web.Response(status=304)
        state.router.count_pull(row["id"], 200)
        body = copy.deepcopy(auth.snapshot(alt=state.router.alt_spelling))
    return json_response(body)


# -- manager side ------------------------------------------------------------


def _strict(request: web.Request) -> bool:
    return request.query.get("strict", "").lower() in ("1", "true", "yes")


def _utc(value: datetime | None) -> str | None:
    if value is None:
        return None
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value.isoformat().replace("+00:00", "Z")


def _live_nodes(request: web.Request, authority: str) -> list[str]:
    state = request.app[STATE_KEY]
    with state.lock:
        check_router_workers(state, request.app[CONFIG_KEY].heartbeat_timeout)
        return state.router.of(authority).live_nodes()


async def list_models(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    with state.lock:
        auth = state.router.of(request.match_info["authority"])
        body = {"models": copy.deepcopy([auth.models[m] for m in sorted(auth.models)]), "revision": auth.revision}
    return json_response(body)


async def put_model(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    authority, model = request.match_info["authority"], request.match_info["model"]
    params = validate(PublicationBody, await load_json(request))
    entry: dict[str, Any] = {
        "model": model,
        "aliases": list(params.aliases),
        "mappings": [{"endpoint_id": str(m.endpoint_id), "ratio": float(m.ratio)} for m in params.mappings],
        "control_mode": params.control_mode,
    }
    with state.lock:
        auth = state.router.of(authority)
        clash = auth.name_clash(model, entry["aliases"])
        if clash:
            raise invalid(clash)
        auth.models[model] = entry
        revision = auth.bump()
        entry = copy.deepcopy(entry)
    prop = await publish_and_wait(request.app, MODEL_UPDATED, authority, entry)
    return json_response({"success": True, "revision": revision, **prop.body(strict=False)})


async def delete_model(request: web.Request) -> web.Response:
    authority, model = request.match_info["authority"], request.match_info["model"]
    return await _delete(request, authority, model, MODEL_REMOVED, lambda a: a.models)


async def list_keys(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    with state.lock:
        auth = state.router.of(request.match_info["authority"])
        body = {"api_keys": copy.deepcopy(auth.listed_keys()), "revision": auth.revision}
    return json_response(body)


async def put_key(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    authority, key_id = request.match_info["authority"], request.match_info["key_id"]
    data = await load_json(request)
    if isinstance(data, dict) and "token" in data:
        raise invalid("a plaintext 'token' is not accepted; send 'token_hash' (sha256, 64 lowercase hex)")
    params = validate(KeyBody, data)
    row = {
        "key_id": key_id,
        "token_hash": params.token_hash,
        "display_hint": params.display_hint,
        "allowed_models": list(params.allowed_models),
        "expires_at": _utc(params.expires_at),
        "rate_limit": params.rate_limit,
        "allowed_client_ips": params.allowed_client_ips,
    }
    with state.lock:
        auth = state.router.of(authority)
        auth.keys[key_id] = row
        revision = auth.bump()
    prop = await publish_and_wait(request.app, KEY_UPDATED, authority, key_id)
    return json_response({"success": True, "revision": revision, **prop.body(strict=False)})


async def delete_key(request: web.Request) -> web.Response:
    authority, key_id = request.match_info["authority"], request.match_info["key_id"]
    return await _delete(request, authority, key_id, KEY_REMOVED, lambda a: a.keys)


async def _delete(request: web.Request, authority: str, entity: str, event: str, table: Any) -> web.Response:
    state = request.app[STATE_KEY]
    strict = _strict(request)
    with state.lock:
        auth = state.router.of(authority)
        rows = table(auth)
        if entity not in rows:
            body: dict[str, Any] = {"success": True, "revision": auth.revision, "propagation": "none", "acked_by": None}
            if strict:
                body["unconfirmed_nodes"] = []
            return json_response(body)
        del rows[entity]
        revision = auth.bump()
    expect = _live_nodes(request, authority) if strict else None
    prop = await publish_and_wait(request.app, event, authority, entity, expect=expect)
    return json_response({"success": True, "revision": revision, **prop.body(strict=strict)})


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/api/worker/{worker_id}/router-config", router_config)
    router.add_get("/v2/routers/{authority}/models", list_models)
    # Model names may hold slashes (``org/model``).
    router.add_put("/v2/routers/{authority}/models/{model:.+}", put_model)
    router.add_delete("/v2/routers/{authority}/models/{model:.+}", delete_model)
    router.add_get("/v2/routers/{authority}/api-keys", list_keys)
    router.add_put("/v2/routers/{authority}/api-keys/{key_id}", put_key)
    router.add_delete("/v2/routers/{authority}/api-keys/{key_id}", delete_key)
