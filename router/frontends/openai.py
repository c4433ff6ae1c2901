"""The OpenAI door: POST /v1/chat/completions, /completions, /embeddings, /responses.

 1 parse the envelope (orjson; raw bytes kept)   → 400 / 413 / 415
 2 admit (router/admission.py)                   → 503, ingress 404/401/403, key 401/403/429
 3 model access                                  → 403 / 404 model_not_found
   then the endpoint's answer keeper (router/extensions.py), e.g. a
   previous_response_id → the stored conversation → its 404 / 413
   then the body resolvers (router/extensions.py) of a body carrying their
   marker, e.g. file ids → inline data           → their 400 / 404 / 413
 4 route (router/pipeline.py)                    → the provider's answer, or 429/502/503/504
   (behind the response cache when it is on: router/respcache/)
 5 render: the upstream's OpenAI bytes as they come (streams chunk by chunk)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from .. import tracing
from ..admission import Request, admit, headers_of, ready_snapshot
from ..core.errors import RequestTooLarge, RouterError
from ..core.snapshot import Snapshot
from ..extensions import answer_keeper, body_resolvers
from ..pipeline import Routed, refused, route
from ..request import Envelope, check_content_type, parse_body
from ..respcache import door as respcache
from .responses import RoutedStream, error_response, observed, rendered

log = logging.getLogger(__name__)


async def handle(request: HttpRequest, endpoint: str) -> HttpResponseBase:
    """Entry point of every POST /v1/<endpoint> that comes through Django
    (router/frontends/direct.py serves the same door straight on ASGI)."""
    result = await routed_or_refusal(request, endpoint, lambda headers, snap: read_body(request, headers, snap))
    if isinstance(result, RouterError):
        return observed(error_response(result))
    return await rendered(result, render, error_response)


async def routed_or_refusal(
    call: Request,
    endpoint: str,
    body: bytes | Callable[[dict[str, str], Snapshot], bytes],
    *,
    on_behalf: str | None = None,
) -> Routed | RouterError:
    """Steps 1–4 for one request: the routed answer, or the (observed) refusal.

    `call` is what admission reads (a Django request, or an
    `admission.Call` around the ASGI scope); `body` is the raw body, or how to read
    it once the headers and the snapshot are known; `on_behalf` admits a
    queued job as the key that queued it (admission.admit)."""
    started = time.perf_counter()
    obs: dict[str, Any] = {"endpoint": endpoint, "frontend": "openai"}
    trace = None
    try:
        snap = await ready_snapshot()
        headers = headers_of(call)
        if tracing.ENABLED:
            trace = tracing.begin("POST", "/v1/" + endpoint, endpoint, headers)
        check_content_type(headers.get("content-type"))
        raw = body if isinstance(body, bytes) else body(headers, snap)
        parsed, model, stream = parse_body(raw, endpoint, snap.max_body_bytes)
        obs["model"] = model
        caller = await admit(call, snap, headers=headers, body=parsed, obs=obs, on_behalf=on_behalf)
        target = caller.pinned or model
        caller.check_model(target)
        kept = None
        if (keeper := answer_keeper(endpoint)) is not None and (kept := await keeper(caller, parsed)) is not None:
            if kept.body is not None:
                parsed, raw = kept.body, orjson.dumps(kept.body)
                if len(raw) > snap.max_body_bytes:
                    raise RequestTooLarge(
                        f"The request with its earlier turns is {len(raw)} bytes; the limit is {snap.max_body_bytes}."
                    )
        for marker, resolve in body_resolvers():
            if marker in raw and (resolved := await resolve(caller, endpoint, parsed)) is not None:
                parsed, raw = resolved, orjson.dumps(resolved)
                if len(raw) > snap.max_body_bytes:
                    raise RequestTooLarge(
                        f"The request with its files inlined is {len(raw)} bytes; the limit is {snap.max_body_bytes}."
                    )
        env = Envelope(
            endpoint=endpoint, raw=raw, body=parsed, model=model, stream=stream, headers=headers,
            client_ip=caller.client_ip, host=caller.host, request_id=caller.request_id,
            max_response_bytes=snap.max_response_bytes, relay_whole=True, stream_usage=snap.stream_usage,
        )
        if trace is not None:
            env.notes["trace"] = trace
        if snap.response_cache is not None:
            routed = await respcache.answer(snap.response_cache, caller, env, target, obs, started)
        else:
            routed = await route(caller, env, target, obs, started)
        if kept is not None and kept.keep is not None:
            kept.keep(routed)
        return routed
    except RouterError as exc:
        refused(exc, obs, started, trace)
        return exc


def read_body(request: HttpRequest, headers: dict[str, str], snap: Snapshot) -> bytes:
    """The request body, refused (413) before it is read when it declares too much."""
    length = headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > snap.max_body_bytes:
        raise RequestTooLarge(f"The request body is {length} bytes; the limit is {snap.max_body_bytes} bytes.")
    try:
        return request.body
    except RequestDataTooBig:
        raise RequestTooLarge(f"The request body is larger than {snap.max_body_bytes} bytes.") from None


def render(routed: Routed) -> HttpResponseBase:
    """OpenAI in, OpenAI out: relay the provider's answer as it comes."""
    response: HttpResponseBase
    if routed.streaming:
        response = RoutedStream(routed.events(), routed, status=routed.status, content_type=routed.content_type)
    else:
        response = HttpResponse(routed.body(), status=routed.status, content_type=routed.content_type)
    for name, value in routed.headers:
        response[name] = value
    return response
