"""ASGI entry point (uvicorn or daphne).

- `POST` on the OpenAI inference paths (`/v1/chat/completions`,
  `/v1/completions`, `/v1/embeddings`, `/v1/responses`) is served straight on
  ASGI (router/frontends/direct.py): the same door, no Django request or
  response.
- `POST` on the rest of the OpenAI surface (`/v1/images/*`, `/v1/audio/*`,
  `/v1/moderations`, `/v1/rerank`, `/v1/score`, and vLLM's `/rerank` and
  `/v2/rerank` outside `/v1`) is served the same way through the surface door
  (router/frontends/surface.py); another method there is a 405.
- `/v1/files*` (the Files API, docs/files.md) is served by its own ASGI door
  (filestore/door.py): it may use the DB and storage, takes no admission
  slot, and its body has ROUTER_FILES_BODY_TIMEOUT to arrive.
- `/v1/responses/…` (stored responses: GET, DELETE, input_items;
  docs/responses.md) is served by its own ASGI door (responsestore/door.py),
  like the files: it reads the DB (on its own thread) and takes no
  admission slot. POST `/v1/responses` itself is the direct door's.
- `/v1/batches*` (docs/files.md) likewise by filestore/batches/door.py;
  the tasks process runs the batches.
- The rest of `/v1/*` and the probe endpoints go to a lean Django handler
  (config.lean): same URLconf and views, no middleware or thread hops.
- Everything else (dashboard, admin, /status) goes through full Django.
- Before any of that (and before any Django work), config.server's limits:
  an over-large request head is a 431 on every server.
- With `cors` configured, a `/v1` preflight is answered before anything
  else (no key), and every other `/v1` answer gets its CORS headers
  (config/cors.py); nothing else ever does.
- A `/v1` request, in this order: its head alone may refuse it
  (`admission.precheck`: a blocking gate's 401s), before a body byte is
  awaited; its body must arrive within ROUTER_BODY_TIMEOUT (408) and every
  write to its client complete within ROUTER_SEND_TIMEOUT
  (config/deadlines.py); and only once its body is whole does it take one of
  the ROUTER_MAX_CONCURRENT admission slots (past them a fast 503 +
  Retry-After), so a client that is still sending, or sends nothing, holds no
  slot. Probes are never shed.
- Each web process starts its routing runtime in its own event loop: on ASGI
  lifespan startup where the server supports it (uvicorn), else on the first
  request (daphne has no lifespan).
"""

import asyncio
import dataclasses
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from django.conf import settings
from django.core.asgi import get_asgi_application

django_app = get_asgi_application()

from config import cors, server  # noqa: E402
from config.deadlines import BODY, Guard  # noqa: E402
from config.lean import LeanASGIHandler  # noqa: E402
from config.statics import StaticFiles  # noqa: E402
from dashboard.routing import websocket_app  # noqa: E402
from filestore import door as files_door  # noqa: E402
from filestore.batches import door as batches_door  # noqa: E402
from responsestore import door as stored_door  # noqa: E402
from router import prefix_purge, spool  # noqa: E402, F401  (prefix_purge subscribes every web process to prefix-index purges)
from router.admission import precheck  # noqa: E402
from router.core.errors import MethodNotAllowed, ShuttingDown  # noqa: E402
from router.frontends import direct, surface  # noqa: E402
from router.runtime import get_runtime  # noqa: E402

lean_app = LeanASGIHandler()
# The admin's CSS/JS (operators only; /v1 never goes through this).
static_app = StaticFiles(django_app)  # what is no static file is a 404 (config/statics.py)
LEAN_PATHS = frozenset({"/livez", "/readyz", "/metrics"})
DIRECT = direct.PATHS
SURFACE = surface.PATHS  # images, audio, moderations, rerank, score (also /rerank, /v2/rerank)
direct.PENDING.limit = server.limits().max_pending_body_bytes  # bodies still arriving, all together
spool.BUDGET.limit = server.limits().max_spooled_bytes  # the surface's forms, memory and disk (router/spool.py)
spool.DIRECTORY = str(settings.ROUTER_SPOOL_DIR)
server.settle_gc()  # what the imports built is kept for the process's life
server.share_the_interpreter()  # the loop waits at most ~1 ms for a busy thread


async def application(scope, receive, send):
    kind = scope["type"]
    if kind in ("http", "websocket"):
        lim = server.limits()
        if server.headers_over_limit(scope["headers"], lim):
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            else:
                await server.send_refusal(send, 431, server.headers_too_large_body(lim))
            return
    if kind == "http":
        await get_runtime().start()  # idempotent: returns at once after the first call
        path = scope["path"]
        if path.startswith("/v1/") or path in surface.ROOT_PATHS:
            await serve_v1(scope, receive, send, path, lim)
        elif path in LEAN_PATHS:
            await lean_app(scope, receive, send)
        elif path.startswith("/static/"):
            await static_app(scope, receive, send)
        else:
            await django_app(scope, receive, send)
    elif kind == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await get_runtime().start()
                server.settle_gc()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                # uvicorn has just cancelled the requests that outlived its grace
                # (ROUTER_STOP_GRACE): each still writes its last frame (a 503,
                # an error event) before the runtime and the loop go.
                until = asyncio.get_running_loop().time() + 2.0
                while server.admission.in_flight and asyncio.get_running_loop().time() < until:
                    await asyncio.sleep(0.01)
                await get_runtime().stop()
                await send({"type": "lifespan.shutdown.complete"})
                return
    elif kind == "websocket":
        await websocket_app(scope, receive, send)


async def serve_v1(scope, receive, send, path: str, lim: server.Limits) -> None:
    """One `/v1` request: the head's refusals, the body within its deadline,
    then an admission slot for as long as it is served (the module doc)."""
    policy = get_runtime().snapshot.cors
    if policy is not None:  # CORS (config/cors.py): a preflight needs no key
        origin, method, asked = cors.asked(scope)
        if method is not None and origin is not None and scope["method"] == "OPTIONS":
            await cors.preflight(policy, send, origin, method, asked)
            return
        if added := policy.on_answer(origin):
            send = cors.answering(send, added)
    refusal = precheck(scope)
    if refusal is not None:
        await direct.send_head_refusal(scope, send, refusal)
        return
    files = files_door.handles(path)
    form = surface.takes_form(path)
    if (files or form) and lim.body_timeout_s:  # an upload may take longer than a chat body to arrive (docs/files.md)
        lim = dataclasses.replace(lim, body_timeout_s=max(lim.body_timeout_s, settings.ROUTER_FILES_BODY_TIMEOUT))
    guard = Guard(scope, receive, send, body_s=lim.body_timeout_s, send_s=lim.send_timeout_s)
    try:
        post = scope["method"] == "POST"
        endpoint = DIRECT.get(path) if post else None
        door = None
        if endpoint is None and path in SURFACE:
            if not post:
                refusal = MethodNotAllowed(f"Method {scope['method']} is not allowed on {path}.", headers={"Allow": "POST"})
                await direct.send_error(guard.send, refusal)
                return
            endpoint, door = path, surface.routed_or_refusal
        if files:
            await files_door.serve(scope, guard.receive, guard.send)
        elif stored_door.handles(path):
            await stored_door.serve(scope, guard.receive, guard.send)
        elif batches_door.handles(path):
            await batches_door.serve(scope, guard.receive, guard.send)
        elif endpoint is not None:
            if form and post:  # spooled as it arrives (router/spool.py), freed once answered
                raw = await surface.receive_form(scope, guard.receive, guard.send)
            else:
                raw = await direct.read_request(scope, guard.receive, guard.send)
            if raw is None:  # refused (413) or gone
                return
            try:
                if not server.admission.try_enter(lim.max_concurrent):
                    await server.send_overloaded(guard.send, lim)
                    return
                try:
                    await direct.serve(scope, guard.receive, guard.send, endpoint, raw, door)
                finally:
                    server.admission.leave()
            finally:
                if isinstance(raw, surface.Received):
                    raw.close()
        else:
            await lean_app.handle(scope, guard.receive, guard.send, admit=lim)
    except asyncio.CancelledError:
        if guard.expired is None and guard.answered:
            raise  # the server's stop, and the door has said what it had to
        asyncio.current_task().uncancel()  # type: ignore[union-attr]
        if guard.expired is None:  # the server's stop, before the door answered (its body still arriving)
            await direct.send_head_refusal(scope, send, ShuttingDown())
        elif guard.expired == BODY:
            await server.send_refusal(send, 408, server.body_timeout_body(lim), ((b"connection", b"close"),))
    finally:
        guard.close()
