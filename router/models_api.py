"""/v1/models: the names this router serves, as the caller's key may see them.

The list is the key's allowlist ∩ published names (names and aliases gated
independently; an empty allowlist sees all). Retrieving one name follows the
same rules as using it: unknown → 404 model_not_found, known but outside the
key's allowlist → 403 model_not_allowed.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import orjson
from django.http import HttpRequest, HttpResponse

from .core.errors import ModelNotFound, NotReady, RouterError
from .proxy import _headers, _peer, error_response
from .runtime import get_runtime


def _model(name: str, created: int) -> dict:
    return {"id": name, "object": "model", "created": created, "owned_by": "router"}


async def _caller(request: HttpRequest):
    """(snapshot, gate, key, pinned model) for this request; may refuse it.

    On an AppProxy circuit host the circuit's own rules apply (as for
    inference) and only the circuit's model is listed.
    """
    rt = get_runtime()
    if not rt.ready:
        await rt.start()
        if not await rt.wait_ready(10.0):
            raise NotReady()
    snap = rt.snapshot
    headers = _headers(request)
    client_ip = _peer(request)
    if snap.trusted_proxies:
        from keys.clientip import client_ip as resolve_ip

        client_ip = resolve_ip(client_ip, headers.get("x-forwarded-for"), snap.trusted_proxies)
    if snap.ingress is not None:
        caller = SimpleNamespace(host=headers.get("host", ""), headers=headers, client_ip=client_ip)
        pinned = snap.ingress.resolve(caller, snap)
        if pinned is not None:
            return snap, None, None, pinned
    gate, key = rt.gate, None
    if gate is not None:
        key = await gate.admit(headers, client_ip, time.time())
    return snap, gate, key, None


async def list_models(request: HttpRequest) -> HttpResponse:
    try:
        snap, gate, key, pinned = await _caller(request)
    except RouterError as exc:
        return error_response(exc)
    names = [pinned] if pinned is not None else snap.model_names()
    if gate is not None:
        names = gate.visible(key, names)
    body = {"object": "list", "data": [_model(n, snap.created) for n in names]}
    return HttpResponse(orjson.dumps(body), content_type="application/json")


async def get_model(request: HttpRequest, model_id: str) -> HttpResponse:
    try:
        snap, gate, key, pinned = await _caller(request)
        known = snap.known(model_id) if pinned is None else model_id == pinned
        if gate is not None:
            gate.check_model(key, model_id, known=known)
        elif not known:
            raise ModelNotFound(f"The model '{model_id}' does not exist.", param="model")
    except RouterError as exc:
        return error_response(exc)
    return HttpResponse(orjson.dumps(_model(model_id, snap.created)), content_type="application/json")
