"""GET /v1/models and /v1/models/{id}: the names this router serves, as the caller may see them.

The list is the key's allowlist ∩ published names (names and aliases gated
independently; an empty allowlist sees all). Retrieving one name follows the
same rules as using it: unknown → 404 model_not_found, known but outside the
key's allowlist → 403 model_not_allowed. On an AppProxy circuit host the
circuit's own rules apply (as for inference) and only its model is listed.
"""

from __future__ import annotations

import orjson
from django.http import HttpRequest, HttpResponse

from ..admission import admit, ready_snapshot
from ..core.errors import RouterError
from .responses import error_response


def _model(name: str, created: int) -> dict:
    return {"id": name, "object": "model", "created": created, "owned_by": "router"}


async def list_models(request: HttpRequest) -> HttpResponse:
    try:
        caller = await admit(request, await ready_snapshot())
    except RouterError as exc:
        return error_response(exc)
    snap = caller.snap
    names = caller.visible([caller.pinned] if caller.pinned is not None else snap.model_names())
    body = {"object": "list", "data": [_model(n, snap.created) for n in names]}
    return HttpResponse(orjson.dumps(body), content_type="application/json")


async def get_model(request: HttpRequest, model_id: str) -> HttpResponse:
    try:
        caller = await admit(request, await ready_snapshot())
        caller.check_model(model_id)
    except RouterError as exc:
        return error_response(exc)
    return HttpResponse(orjson.dumps(_model(model_id, caller.snap.created)), content_type="application/json")
