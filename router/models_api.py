"""/v1/models: the names this router serves, as the caller's key may see them."""

from __future__ import annotations

import time

import orjson
from django.http import HttpRequest, HttpResponse

from .core.errors import ModelNotFound, NotReady, RouterError
from .proxy import _headers, _peer, error_response
from .runtime import get_runtime


def _model(name: str, created: int) -> dict:
    return {"id": name, "object": "model", "created": created, "owned_by": "router"}


async def _visible(request: HttpRequest) -> tuple[list[str], int]:
    rt = get_runtime()
    if not rt.ready:
        await rt.start()
        if not await rt.wait_ready(10.0):
            raise NotReady()
    snap = rt.snapshot
    names = snap.model_names()
    if rt.gate is not None:
        headers = _headers(request)
        peer = _peer(request)
        client_ip = peer
        if snap.trusted_proxies:
            from keys.clientip import client_ip as resolve_ip

            client_ip = resolve_ip(peer, headers.get("x-forwarded-for"), snap.trusted_proxies)
        key = await rt.gate.admit(headers, client_ip, time.time())
        names = rt.gate.visible(key, names)
    return names, snap.created


async def list_models(request: HttpRequest) -> HttpResponse:
    try:
        names, created = await _visible(request)
    except RouterError as exc:
        return error_response(exc)
    body = {"object": "list", "data": [_model(n, created) for n in names]}
    return HttpResponse(orjson.dumps(body), content_type="application/json")


async def get_model(request: HttpRequest, model_id: str) -> HttpResponse:
    try:
        names, created = await _visible(request)
        if model_id not in names:
            raise ModelNotFound(f"The model '{model_id}' does not exist.", param="model")
    except RouterError as exc:
        return error_response(exc)
    return HttpResponse(orjson.dumps(_model(model_id, created)), content_type="application/json")
