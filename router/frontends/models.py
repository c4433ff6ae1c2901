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
from ..core.snapshot import Snapshot
from .responses import error_response


def _model(name: str, created: int) -> dict:
    return {"id": name, "object": "model", "created": created, "owned_by": "router"}


def _render(names: list[str], created: int) -> bytes:
    return orjson.dumps({"object": "list", "data": [_model(n, created) for n in names]})


# The sorted names and the whole list's body of the last snapshot asked for:
# at 2,000 model names, sorting and rendering them was most of the request.
_full: tuple[Snapshot | None, list[str], bytes] = (None, [], b"")


def _all_of(snap: Snapshot) -> tuple[list[str], bytes]:
    global _full
    if _full[0] is not snap:
        names = snap.model_names()
        _full = (snap, names, _render(names, snap.created))
    return _full[1], _full[2]


async def list_models(request: HttpRequest) -> HttpResponse:
    try:
        caller = await admit(request, await ready_snapshot())
    except RouterError as exc:
        return error_response(exc)
    snap = caller.snap
    if caller.pinned is not None:
        body = _render(caller.visible([caller.pinned]), snap.created)
    else:
        names, whole = _all_of(snap)
        visible = caller.visible(names)
        # A key that sees every name (no allowlist) gets the body rendered once.
        body = whole if len(visible) == len(names) else _render(visible, snap.created)
    return HttpResponse(body, content_type="application/json")


async def get_model(request: HttpRequest, model_id: str) -> HttpResponse:
    try:
        caller = await admit(request, await ready_snapshot())
        caller.check_model(model_id)
    except RouterError as exc:
        return error_response(exc)
    return HttpResponse(orjson.dumps(_model(model_id, caller.snap.created)), content_type="application/json")
