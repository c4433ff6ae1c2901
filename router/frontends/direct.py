"""The OpenAI door served straight on ASGI: no Django request or response.

`POST /v1/chat/completions`, `/v1/completions`, `/v1/embeddings` and
`/v1/responses` are most of a router's traffic (the rest of the OpenAI
surface, router/frontends/surface.py, is served the same way with its own
door: `serve(…, door=…)`). For them the ASGI entry point
(config/asgi.py) calls `read_request` (the body, before the request takes
an admission slot) and then `serve` instead of the lean Django handler: the
same door (`openai.routed_or_refusal`: parse, admit, route), the same
`Routed` result, but the body is read from `receive` and the answer written
to `send` directly. What that skips per request, measured with py-spy under load
(docs/performance.md): Django's `ASGIRequest` and `HttpResponse`, the URL
resolver, Ninja's operation wrapper, Django's `send_response`, and the
two tasks the lean handler runs per request (view and disconnect listener).

Everything else about these paths is the lean handler's, and stays where it
was: any other method on them (405 with `Allow`), a trailing slash, every
other `/v1` path and the probes still go through Django. The body limits
are the same functions (`body_limit`, `declared_length`, `send_too_large`,
which config/lean.py imports from here).

Disconnects: a request still being served after `LISTEN_AFTER` (50 ms)
gets a listener task; a client that goes away then cancels the serving task
while it awaits the upstream or relays a stream, and the upstream is closed
and the slot freed (`Routed.aclose`, idempotent) with no verdict against
the backend, exactly as through Django. A quicker answer never needs the
listener, and none is made.

A cancellation that is not the client's is the server's: uvicorn cancels
what still runs when its graceful stop's grace (ROUTER_STOP_GRACE) is over,
daphne at once. Such a request is told (`_stopped`): a 503
`server_shutting_down` when no answer began, the error event that ends an
event stream under way; then it ends normally, never as a bare cut.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any

import orjson
from django.conf import settings

from .. import tracing
from ..admission import Call, headers_of
from ..core.errors import BodiesPending, RequestTooLarge, RouterError, ShuttingDown
from ..observe import Gaps
from ..pipeline import Routed, refused
from ..providers.base import AnswerCut
from ..runtime import get_runtime
from ..spool import Budget
from . import openai
from .anthropic_response import error_body as anthropic_error_body
from .responses import as_refusal

log = logging.getLogger(__name__)

# Exact paths (the scope's path has no query string), POST only.
PATHS: dict[str, str] = {
    "/v1/chat/completions": "chat/completions",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
    "/v1/responses": "responses",
}

# A door: (the request, its endpoint or path, its body) → the routed answer or
# the refusal. The body is bytes, or what the door's own reader kept (the
# surface's spooled forms, router/frontends/surface.py `Received`).
Door = Callable[[Call, str, Any], Awaitable[Routed | RouterError]]

_JSON = b"application/json"
_EVENT_STREAM_HEADERS = ((b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no"))


def body_limit() -> int:
    """The body limit in force: the snapshot's, or the setting before the first one."""
    snap = get_runtime().snapshot
    return snap.max_body_bytes if snap.revision >= 0 else settings.ROUTER_MAX_BODY_BYTES


def declared_length(scope: dict[str, Any]) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


async def send_too_large(send, limit: int) -> None:
    body = RequestTooLarge(f"The request body is larger than {limit} bytes.").to_body()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", _JSON),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class _Gone(Exception):
    """The client disconnected while the body was being read."""


# The bytes of `/v1` bodies this process is still receiving. A body takes no
# admission slot while it arrives (config/asgi.py), so without a bound of
# their own, many slow clients could each hold up to server.max_body_bytes in
# memory at once; past `PENDING.limit` (ROUTER_MAX_PENDING_BODY_BYTES; 0:
# none) a new or growing body is refused 503 with Retry-After. Only the event
# loop's thread touches it.
PENDING = Budget()


class _Over(Exception):
    """The process's body budget (`PENDING`) ran out while this body arrived."""


async def read_body(receive, limit: int, budget: Budget = PENDING) -> bytes | None:
    """The whole body, or None once it is past `limit`; raises _Gone on a
    disconnect, _Over when the process's `budget` of bodies being received
    has no room for the next chunk.

    The OpenAI door parses the body as one JSON document in memory anyway, so
    it is gathered as bytes (never more than `limit` of them)."""
    message = await receive()
    if message["type"] == "http.disconnect":
        raise _Gone()
    body = message.get("body", b"")
    if not message.get("more_body", False):
        return body if len(body) <= limit else None
    chunks = [body]
    size = held = len(body)
    if not budget.room(held):
        raise _Over()
    budget.held += held
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Gone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            if not budget.room(len(chunk)):
                raise _Over()
            budget.held += len(chunk)
            held += len(chunk)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
    finally:
        budget.held -= held


# A request still being served after this long gets a listener for its
# client's disconnect. Most answers are done sooner, and then no task is ever
# made for it (a task per request, started and cancelled, was ~3 % of the
# CPU); a disconnect is noticed at most this late.
LISTEN_AFTER = 0.05


class _Watch:
    """The disconnect listener of one request, started only if it runs long."""

    __slots__ = ("gone", "listener", "receive", "task")

    def __init__(self, receive, task: asyncio.Task) -> None:
        self.receive = receive
        self.task = task
        self.gone = False
        self.listener: asyncio.Task | None = None

    def start(self) -> None:
        self.listener = asyncio.get_running_loop().create_task(self._listen())

    async def _listen(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self.gone = True
        self.task.cancel()

    def stop(self) -> None:
        """After this, the listener never cancels the task (a task cancelled
        before its next step never runs past its await)."""
        if self.listener is not None:
            self.listener.cancel()


async def read_request(scope: dict[str, Any], receive, send) -> bytes | None:
    """The body of one POST on an OpenAI path; None once it was refused (413)
    or its client went away. Read before the request is admitted
    (config/asgi.py): reading takes no admission slot."""
    limit = body_limit()
    declared = declared_length(scope)
    if declared > limit:
        # Refuse before reading a byte: a huge body never reaches memory.
        await send_too_large(send, limit)
        return None
    try:
        if not PENDING.room(declared):
            raise _Over()
        raw = await read_body(receive, limit)
    except _Gone:
        return None
    except _Over:
        await send_error(send, BodiesPending(headers={"Retry-After": "1"}))
        return None
    if raw is None:
        await send_too_large(send, limit)
    return raw


_TRACED_ANTHROPIC = {"/v1/messages": "chat/completions", "/v1/messages/count_tokens": "messages/count_tokens"}


async def send_head_refusal(scope: dict[str, Any], send, exc: RouterError) -> None:
    """A refusal decided from the request head alone (`admission.precheck`, a
    stop before the body was read), in the shape of the door the path belongs
    to, observed and traced as that door would."""
    started = perf_counter()
    path = scope["path"]
    anthropic = path.startswith("/v1/messages")
    traced = _TRACED_ANTHROPIC.get(path) if anthropic else PATHS.get(path)
    endpoint = traced or path.removeprefix("/v1/")[:64]
    obs = {"endpoint": endpoint, "frontend": "anthropic"} if anthropic else {"endpoint": endpoint, "frontend": "openai"}
    trace = None
    if tracing.ENABLED and traced is not None and scope["method"] == "POST":
        trace = tracing.begin("POST", path, endpoint, headers_of(Call(scope)))
    refused(exc, obs, started, trace)
    if not anthropic:
        await send_error(send, exc)
        return
    body = anthropic_error_body(exc.status, exc.message)
    await send({"type": "http.response.start", "status": exc.status,
                "headers": [(b"content-type", _JSON), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def serve(scope: dict[str, Any], receive, send, endpoint: str, raw: Any, door: Door | None = None) -> None:
    """Answer one POST on an OpenAI path whose body `read_request` read (see the module doc).

    `door` is what parses, admits and routes it: the inference door
    (`openai.routed_or_refusal`) by default, the surface's for its paths
    (router/frontends/surface.py, called with the path)."""
    task = asyncio.current_task()
    assert task is not None
    watch = _Watch(receive, task)
    timer = asyncio.get_running_loop().call_later(LISTEN_AFTER, watch.start)
    routed: Routed | None = None  # set: the relay owns the answer (it refuses what it can before it begins)
    try:
        result = await (door or openai.routed_or_refusal)(Call(scope), endpoint, raw)
        if isinstance(result, RouterError):
            await send_error(send, result)
            return
        routed = result
        await _relay(routed, send)
    except asyncio.CancelledError:
        if not watch.gone:  # not the client's: the server stops (module doc)
            await _stopped(send, routed)
        task.uncancel()
    except Exception as exc:  # a bug of ours: an OpenAI-shaped 500, never a traceback to the client
        log.error("serving %s failed: %s", scope.get("path"), type(exc).__name__, exc_info=exc)
        if routed is None and not watch.gone:
            try:
                await send_error(send, RouterError())
            except Exception:  # the connection is gone or the answer had begun: nothing more to say
                pass
    finally:
        # Synchronous: from here on the listener can no longer cancel this task.
        timer.cancel()
        watch.stop()
        if routed is not None:
            await routed.aclose()  # idempotent: frees the slot and the upstream if the relay did not


async def _stopped(send, routed: Routed | None) -> None:
    """What a request the server's stop cut is told: a 503 before any answer
    (`routed` not yet set), the event that ends an event stream under way;
    a whole answer under way just ends. (A send deadline that could not
    abort its transport, config/deadlines.py, cancels the same way; that
    client does not read, and the frame waits out one more deadline.)"""
    try:
        if routed is None:
            await send_error(send, ShuttingDown())
        elif routed.streaming and routed.content_type.startswith("text/event-stream"):
            await send({"type": "http.response.body", "body": ShuttingDown().to_sse(), "more_body": False})
    except (OSError, RuntimeError):  # the connection is gone, or the answer had not begun as we thought
        pass


async def serve_guarded(handler, scope: dict[str, Any], receive, send, *,
                        shaped: Callable[[RouterError], RouterError] = lambda exc: exc) -> None:
    """Run a door of its own (`handler(scope, receive, send)`: the Files,
    Batches and stored-responses doors) so that what it raises before its
    answer began reaches the client in OpenAI's shape: a RouterError as
    itself (through `shaped`), anything else logged and answered 500, never
    a traceback. Once the answer began, nothing more is sent."""
    started = False

    async def sending(message: dict[str, Any]) -> None:
        nonlocal started
        started = True
        await send(message)

    try:
        await handler(scope, receive, sending)
    except RouterError as exc:
        if not started:
            await send_error(send, shaped(exc))
    except Exception as exc:  # a bug, the DB or the storage away
        log.error("serving %s failed: %s", scope.get("path"), type(exc).__name__, exc_info=exc)
        if not started:
            await send_error(send, RouterError())


async def drain(receive) -> bool:
    """Read a GET/DELETE's (empty) body to its end, so its body deadline
    stops; False if the client went away. What a client sends is ignored."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return False
        if not message.get("more_body", False):
            return True


async def send_json(send, payload: dict[str, Any] | bytes) -> None:
    """A 200 with a JSON body (`payload`, or its bytes already encoded)."""
    body = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", _JSON), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def send_error(send, exc: RouterError) -> None:
    """An error in the door's shape, with its own headers (e.g. Retry-After)."""
    body = exc.to_body()
    headers = {b"content-type": _JSON, b"content-length": str(len(body)).encode()}
    for name, value in exc.headers.items():
        headers[name.lower().encode("latin1")] = str(value).encode("latin1")
    await send({"type": "http.response.start", "status": exc.status, "headers": list(headers.items())})
    await send({"type": "http.response.body", "body": body})


def _start(routed: Routed, *, length: int | None) -> dict[str, Any]:
    """The status line and headers. The relayed upstream headers replace the
    defaults of the same name, as they do on a Django response (names are
    case-insensitive; the last value of a name wins); a whole answer's
    Content-Length is always the length of the bytes sent."""
    content_type = routed.content_type
    headers = {b"content-type": content_type.encode("latin1")}
    if length is None and content_type.startswith("text/event-stream"):
        headers.update(_EVENT_STREAM_HEADERS)
    for name, value in routed.headers:
        headers[name.lower().encode("latin1")] = value.encode("latin1")
    if length is not None:  # the length of what is sent, whatever the upstream said of its own
        headers[b"content-length"] = str(length).encode()
    return {"type": "http.response.start", "status": routed.status, "headers": list(headers.items())}


async def _relay(routed: Routed, send) -> None:
    """The provider's answer, as it comes: a whole body, or a stream chunk by
    chunk; a failure before the status is sent is refused in the door's shape."""
    if not routed.streaming:
        try:
            body = routed.body()
        except Exception as exc:  # nothing the render does may keep the slot
            await routed.aclose()
            await send_error(send, as_refusal(exc))
            return
        await send(_start(routed, length=len(body)))
        await send({"type": "http.response.body", "body": body})
        return
    try:
        events = routed.events()
        start = _start(routed, length=None)
    except Exception as exc:
        await routed.aclose()
        await send_error(send, as_refusal(exc))
        return
    # The inter-token gaps, as RoutedStream times them through Django (docs/metrics.md).
    tick = (gaps := Gaps()).tick
    routed.obs["gaps"] = gaps
    await send(start)
    try:
        async for part in events:
            tick(perf_counter())
            await send({"type": "http.response.body", "body": part, "more_body": True})
    except AnswerCut:
        return  # no last chunk: the server closes the connection, the client sees the answer cut
    await send({"type": "http.response.body", "body": b""})

