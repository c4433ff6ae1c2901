"""Shared machinery for the fake LLM backends (OpenAI-compatible and Ollama).

The fakes speak the real wire formats and are used by the test suite (as the
router's upstreams), by `make run` (demo backends) and by the benchmark (a fast
upstream).  This module holds what both share:

* `Recorded` - one request as the backend received it;
* `Behavior` - mutable fault injection (error status, delays, dropped or
  half-finished connections, hangs, stream length);
* `ServerThread` - runs an aiohttp app in a background thread with its own
  event loop; `stop()` kills it like a crashed process (listener closed, open
  connections aborted), `start()` revives it on the same port;
* `serve()` - runs an app in the foreground (the CLIs);
* `cli()` - the `python -m fakes.<fake>` command line, whose defaults are the
  demo's: a 22-word reply streamed a word every DEMO_TOKEN_DELAY_MS (40 ms);
* small deterministic helpers for reply text, token counts, tool arguments and
  embedding vectors.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import math
import os
import signal
import socket
import struct
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

import orjson
from aiohttp import web

__all__ = [
    "AppFactory",
    "Behavior",
    "Faults",
    "IdGen",
    "Recorded",
    "ServerThread",
    "count_tokens",
    "embedding_vector",
    "reply_pieces",
    "serve",
    "tool_arguments",
]

log = logging.getLogger(__name__)

JSON_CT = "application/json"
FAKE_KEY: web.AppKey[Any] = web.AppKey("fake_backend", object)  # app[FAKE_KEY] -> the fake
MAX_BODY = 64 * 1024 * 1024  # images in chat requests can be large


# ---------------------------------------------------------------------------
# records and behaviour
# ---------------------------------------------------------------------------


@dataclass
class Recorded:
    """One POST request exactly as the backend received it.

    `outcome` is None while the handler runs, then "completed" (answered,
    stream written to the end), "cancelled" (the connection went away: client
    disconnect, injected drop/die, or the backend was killed) or "error".
    `finished` is set at the same moment, so tests can wait on it.
    """

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    json: Any = None  # parsed body, None when absent or not JSON
    outcome: str | None = field(default=None, compare=False)
    finished: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    def _finish(self, outcome: str) -> None:
        if self.outcome is None:
            self.outcome = outcome
            self.finished.set()


RECORD_KEY: web.RequestKey[Recorded] = web.RequestKey("fake_backend_recorded", Recorded)


@web.middleware
async def track_outcome(request: web.Request, handler: Any) -> web.StreamResponse:
    """Sets `Recorded.outcome` (only installed when requests are recorded)."""
    try:
        resp = await handler(request)
    except asyncio.CancelledError:
        rec = request.get(RECORD_KEY)
        if rec is not None:
            rec._finish("cancelled")
        raise
    except BaseException:
        rec = request.get(RECORD_KEY)
        if rec is not None:
            rec._finish("error")
        raise
    rec = request.get(RECORD_KEY)
    if rec is not None:
        rec._finish("completed")
    return resp


@dataclass
class Behavior:
    """Fault injection, shared by a backend across restarts.

    Plain attributes, read once per request by the handlers (attribute
    assignment is atomic in CPython, which is thread-safe enough for tests
    that flip them from the main thread).
    """

    status: int | None = None  # answer every POST with this error status
    error_message: str | None = None  # message for `status` (default generic)
    error_headers: dict[str, str] = field(default_factory=dict)  # e.g. Retry-After
    delay_s: float = 0.0  # before the response headers
    chunk_delay_s: float = 0.0  # between stream frames
    drop_before_response: bool = False  # close the TCP connection, no answer
    die_after_chunks: int | None = None  # abort the connection after k frames
    hang: bool = False  # never answer (until the client or stop() ends it)
    chunks: int = 5  # content pieces a reply has (stream frames with content)
    # What /metrics reports beyond the requests this fake is answering: other
    # clients' requests running and waiting there; `metrics` False answers 404.
    extra_running: int = 0
    waiting: int = 0
    metrics: bool = True
    # Until this wall-clock time (time.time()) every request, GET included, is
    # answered as llama.cpp's server answers while it loads its model: 503
    # {"error": {"message": "Loading model", ...}} (fakes/openai_backend.py).
    loading_until: float = 0.0
    # A stream that honours it (the speech audio, fakes/media.py) waits after
    # its first chunk until this event is set: a test sees the first bytes
    # arrive while the backend is still answering, with no timing involved.
    hold: threading.Event | None = None
    # Every POST waits, once recorded, until this event is set: a test orders
    # two replicas' answers (one fails only after the other got its request).
    gate: threading.Event | None = None

    def reset(self) -> None:
        fresh = Behavior()
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(fresh, name))


# ---------------------------------------------------------------------------
# request prologue shared by every POST handler
# ---------------------------------------------------------------------------


class Faults:
    """Records requests and applies `Behavior` before a POST handler answers.

    `await faults.begin(request)` returns `(body, parsed_json_or_None,
    error_response_or_None)`; the handler returns the error response when one
    is given (forced `Behavior.status`).  Dropped or hung requests never
    return: the handler task is cancelled when the connection goes away.
    """

    def __init__(
        self,
        behavior: Behavior,
        requests: list[Recorded] | None,
        error: Callable[[int, str], web.Response],
    ) -> None:
        self.behavior = behavior
        self.requests = requests
        self.error = error

    @property
    def middlewares(self) -> list[Any]:
        return [track_outcome] if self.requests is not None else []

    async def begin(self, request: web.Request) -> tuple[bytes, Any, web.Response | None]:
        body = await request.read()
        data: Any = None
        if body:
            try:
                data = orjson.loads(body)
            except orjson.JSONDecodeError:
                data = None
        if self.requests is not None:
            rec = Recorded(
                method=request.method,
                path=request.path_qs,
                headers={k.lower(): v for k, v in request.headers.items()},
                body=body,
                json=data,
            )
            request[RECORD_KEY] = rec
            self.requests.append(rec)
        b = self.behavior
        if b.drop_before_response:
            await abort_connection(request)
        if b.hang:
            await wait_forever()
        if b.gate is not None:
            while not b.gate.is_set():
                await asyncio.sleep(0.01)
        if b.delay_s:
            await asyncio.sleep(b.delay_s)
        if b.status is not None:
            resp = self.error(b.status, b.error_message or _default_message(b.status))
            if b.error_headers:
                resp.headers.update(b.error_headers)
            return body, data, resp
        return body, data, None


def _default_message(status: int) -> str:
    return {
        400: "Bad request (injected by the fake backend).",
        401: "Incorrect API key provided (injected by the fake backend).",
        403: "Forbidden (injected by the fake backend).",
        404: "Not found (injected by the fake backend).",
        408: "Request timed out (injected by the fake backend).",
        429: "Rate limit reached (injected by the fake backend).",
        500: "The server had an error while processing your request (injected by the fake backend).",
        502: "Bad gateway (injected by the fake backend).",
        503: "The engine is currently overloaded (injected by the fake backend).",
    }.get(status, f"Error {status} (injected by the fake backend).")


async def wait_forever() -> None:
    """Block until the task is cancelled (client gone, or the server killed)."""
    await asyncio.get_running_loop().create_future()


async def abort_connection(request: web.Request) -> None:
    """Close the client's TCP connection abruptly and never return.

    The app runs with `handler_cancellation=True`, so losing the connection
    cancels this handler task.
    """
    transport = request.transport
    if transport is not None:
        transport.abort()
    await wait_forever()


class StreamWriter:
    """Writes stream frames one by one, honouring chunk delay and mid-stream death."""

    __slots__ = ("delay", "die_after", "request", "resp", "written")

    def __init__(self, resp: web.StreamResponse, request: web.Request, behavior: Behavior) -> None:
        self.resp = resp
        self.request = request
        self.delay = behavior.chunk_delay_s
        self.die_after = behavior.die_after_chunks
        self.written = 0

    async def start(self) -> None:
        await self.resp.prepare(self.request)
        if self.die_after is not None and self.die_after <= 0:
            await abort_connection(self.request)

    async def send(self, frame: bytes) -> None:
        if self.written and self.delay:
            await asyncio.sleep(self.delay)
        await self.resp.write(frame)
        self.written += 1
        if self.die_after is not None and self.written >= self.die_after:
            await abort_connection(self.request)

    async def finish(self) -> web.StreamResponse:
        await self.resp.write_eof()
        return self.resp


# ---------------------------------------------------------------------------
# deterministic content helpers
# ---------------------------------------------------------------------------

_FILLER = (" This", " is", " a", " demo", " reply.")
# What a longer reply goes on with (the CLIs' default length), word by word.
_GOES_ON = tuple(f" {word}" for word in "It arrives one token at a time, as a real model would send it.".split())
_pieces_cache: dict[tuple[str, int], tuple[str, ...]] = {}


def reply_pieces(name: str, n: int) -> tuple[str, ...]:
    """The reply of backend `name`, split into exactly `n` pieces (n >= 0).

    For n <= 8 the text is "Hello from <name>. This is a demo reply."; up to
    `DEMO_CHUNKS` pieces it goes on " It arrives one token at a time, …",
    a word a piece; more pieces append " More." words.  Cached: this is on
    the hot path.
    """
    key = (name, n)
    cached = _pieces_cache.get(key)
    if cached is not None:
        return cached
    words = ["Hello", " from", f" {name}.", *_FILLER]
    if n <= 0:
        pieces: tuple[str, ...] = ()
    elif n < len(words):
        head = len(words) - n + 1
        pieces = ("".join(words[:head]), *words[head:])
    else:
        more = _GOES_ON[: n - len(words)]
        pieces = (*words, *more, *([" More."] * (n - len(words) - len(more))))
    if len(_pieces_cache) < 4096:
        _pieces_cache[key] = pieces
    return pieces


def split_text(text: str, n: int) -> list[str]:
    """Split `text` into `n` contiguous non-empty-ish pieces (for JSON replies)."""
    if n <= 1 or len(text) <= 1:
        return [text] if n >= 1 else []
    n = min(n, len(text))
    size, extra = divmod(len(text), n)
    out, pos = [], 0
    for i in range(n):
        step = size + (1 if i < extra else 0)
        out.append(text[pos : pos + step])
        pos += step
    return out


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                t = part.get("text")
                if isinstance(t, str):
                    parts.append(t)
        return " ".join(parts)
    return str(content)


def count_tokens(*texts: Any) -> int:
    """A cheap deterministic stand-in for a tokenizer: whitespace words."""
    total = 0
    for t in texts:
        total += len(_text_of(t).split())
    return max(total, 1)


def messages_text(messages: Any) -> list[str]:
    if not isinstance(messages, list):
        return []
    return [_text_of(m.get("content")) for m in messages if isinstance(m, dict)]


def last_user_text(messages: Any) -> str:
    """The last user message's text; "" when the conversation ends with a tool
    result (the model then answers in text instead of calling the tool again)."""
    if isinstance(messages, list):
        if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool":
            return ""
        for m in reversed(messages):
            if isinstance(m, dict) and m.get("role") == "user":
                return _text_of(m.get("content"))
    return ""


def _example_value(schema: Any, key: str = "") -> Any:
    if not isinstance(schema, dict):
        return "Paris"
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    typ = schema.get("type")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), "string")
    if typ == "integer":
        return 21
    if typ == "number":
        return 21.5
    if typ == "boolean":
        return True
    if typ == "array":
        return [_example_value(schema.get("items"), key)]
    if typ == "object":
        return schema_example(schema)
    lowered = key.lower()
    if "unit" in lowered or "format" in lowered:
        return "celsius"
    return "Paris"


def schema_example(schema: Any, text: str = "") -> Any:
    """A value conforming (loosely) to a JSON schema; strings say `text`."""
    if not isinstance(schema, dict):
        return {}
    props = schema.get("properties")
    if not isinstance(props, dict):
        return {}
    required = schema.get("required")
    keys = [k for k in props if not isinstance(required, list) or k in required] or list(props)
    out = {}
    for k in keys:
        v = _example_value(props[k], k)
        if text and isinstance(v, str) and v == "Paris" and "city" not in k and "location" not in k:
            v = text
        out[k] = v
    return out


def tool_arguments(parameters: Any) -> dict[str, Any]:
    """Arguments for a tool call that satisfy the tool's parameter schema."""
    args = schema_example(parameters)
    if not args and isinstance(parameters, dict) and not parameters.get("properties"):
        return {}
    return args


def embedding_vector(text: Any, dims: int = 8) -> list[float]:
    """Deterministic unit-ish vector; exactly representable as float32."""
    raw = text if isinstance(text, str) else orjson.dumps(text).decode()
    digest = hashlib.sha256(raw.encode()).digest()
    while len(digest) < dims * 2:
        digest += hashlib.sha256(digest).digest()
    ints = struct.unpack(f"<{dims}h", digest[: dims * 2])
    return [i / 32768.0 for i in ints]


class IdGen:
    """Cheap unique ids: random per-process prefix + counter."""

    __slots__ = ("_counter", "_prefix")

    def __init__(self) -> None:
        self._prefix = os.urandom(6).hex()
        self._counter = itertools.count(1)

    def __call__(self, kind: str) -> str:
        return f"{kind}{self._prefix}{next(self._counter):08x}"


# ---------------------------------------------------------------------------
# running apps
# ---------------------------------------------------------------------------

AppFactory = Callable[[Behavior, "list[Recorded]"], web.Application]


def make_runner(app: web.Application, *, access_log: bool = False) -> web.AppRunner:
    return web.AppRunner(
        app,
        access_log=log if access_log else None,
        handler_cancellation=True,  # a lost client cancels the handler (hang, drops)
        shutdown_timeout=0.5,
    )


async def serve(
    app: web.Application,
    host: str = "127.0.0.1",
    port: int = 8001,
    *,
    access_log: bool = False,
    on_ready: Callable[[int], None] | None = None,
) -> None:
    """Run `app` in the foreground until cancelled, Ctrl-C or SIGTERM.

    `on_ready(port)` is called once the socket listens (port 0 -> real port).
    """
    runner = make_runner(app, access_log=access_log)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, reuse_address=True, backlog=1024)
        await site.start()
        if on_ready is not None:
            on_ready(site.port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def run_cli(app: web.Application, host: str, port: int, *, quiet: bool, banner: str) -> None:
    """Entry point shared by the backends' `python -m` CLIs."""
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, format="%(message)s")

    def ready(bound: int) -> None:
        if not quiet:
            print(f"{banner} listening on http://{host}:{bound}", flush=True)

    try:
        with contextlib.suppress(ImportError):  # uvloop is optional
            import uvloop

            uvloop.install()
        asyncio.run(serve(app, host, port, access_log=not quiet, on_ready=ready))
    except KeyboardInterrupt:
        pass


class ServerThread:
    """An aiohttp app served from a background thread (its own event loop).

    `factory(behavior, requests)` builds a fresh app for every start (an app
    is bound to the loop that ran it).  `behavior` and `requests` survive
    restarts, and so does the port: `stop()` then `start()` revives the
    backend at the same `url`.
    """

    def __init__(
        self,
        factory: AppFactory,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        behavior: Behavior | None = None,
        requests: list[Recorded] | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        self.factory = factory
        self.host = host
        self.port = port
        self.behavior = behavior if behavior is not None else Behavior()
        self.requests: list[Recorded] = requests if requests is not None else []
        self.start_timeout = start_timeout
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._sites: list[web.BaseSite] = []
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    # -- public -----------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> Self:
        with self._lock:
            if self.running:
                return self
            self._ready = threading.Event()
            self._error = None
            self._thread = threading.Thread(target=self._run, name=f"fake-backend:{self.port or 'new'}", daemon=True)
            self._thread.start()
            if not self._ready.wait(self.start_timeout):
                raise RuntimeError(f"fake backend did not start within {self.start_timeout}s")
            if self._error is not None:
                err, self._error = self._error, None
                self._thread.join(self.start_timeout)
                self._thread = None
                raise err
            return self

    def stop(self) -> None:
        """Kill the backend: stop listening and abort every open connection."""
        with self._lock:
            thread, loop = self._thread, self._loop
            if thread is None or loop is None or not thread.is_alive():
                self._thread = None
                return
            fut = asyncio.run_coroutine_threadsafe(self._kill(), loop)
            try:
                fut.result(self.start_timeout)
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(self.start_timeout)
                self._thread = None

    restart = start

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<ServerThread {self.url} {state}>"

    # -- thread body -------------------------------------------------------

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            try:
                loop.run_until_complete(self._setup())
            except BaseException as exc:
                self._error = exc
                self._ready.set()
                return
            self._ready.set()
            loop.run_forever()
        finally:
            try:
                pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                for t in pending:
                    t.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()
                self._loop = None

    async def _setup(self) -> None:
        app = self.factory(self.behavior, self.requests)
        runner = make_runner(app)
        await runner.setup()
        self._runner = runner
        # Bind ourselves so a restart can reuse the exact port (SO_REUSEADDR
        # lets the port be re-bound while old connections sit in TIME_WAIT).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        self.port = sock.getsockname()[1]
        site = web.SockSite(runner, sock, backlog=1024)
        await site.start()
        self._sites = [site]

    async def _kill(self) -> None:
        runner = self._runner
        if runner is None:
            return
        # Stop accepting at once. aiohttp's BaseSite.stop() closes the listener
        # without waiting for open connections (tests/fakes/test_server.py pins
        # that), so the aborts below still hit every in-flight request.
        for site in self._sites:
            await site.stop()
        srv = runner.server
        if srv is not None:
            for handler in srv.connections:
                transport = handler.transport
                if transport is not None:
                    transport.abort()
        # let connection_lost callbacks run (they cancel the handlers)
        await asyncio.sleep(0)
        await runner.cleanup()
        self._runner = None
        self._sites = []


MakeApp = Callable[[str, list[str], "Behavior | None", "list[Recorded] | None"], web.Application]


def thread_for(
    make_app: MakeApp, name: str, models: list[str] | tuple[str, ...], *, port: int = 0,
    host: str = "127.0.0.1", behavior: Behavior | None = None,
) -> ServerThread:
    """A (not yet started) `ServerThread` serving one fake; use `with` or `.start()`."""
    model_list = list(models)
    return ServerThread(lambda b, reqs: make_app(name, model_list, b, reqs), host=host, port=port, behavior=behavior)


# The CLIs are the demo backends (`make run`, scripts/demo-router.sh): by
# default a reply of a sentence or two streamed a word at a human pace, so an
# SDK client sees it arrive.  In-process fakes (`ServerThread`, the tests)
# keep `Behavior()`'s instant five pieces; the benchmark asks for
# `--chunks 5 --chunk-delay 0`.
DEMO_CHUNKS = 8 + len(_GOES_ON)
DEMO_PACE_ENV = "DEMO_TOKEN_DELAY_MS"
DEMO_PACE_MS_DEFAULT = 40


def demo_pace_s(env: Mapping[str, str]) -> float:
    """Seconds between the demo backends' stream frames: DEMO_TOKEN_DELAY_MS
    (milliseconds, >= 0), 40 ms when unset; a bad value raises ValueError
    naming the variable."""
    raw = (env.get(DEMO_PACE_ENV) or "").strip()
    if not raw:
        return DEMO_PACE_MS_DEFAULT / 1000
    try:
        ms = float(raw)
    except ValueError:
        ms = -1.0
    if not (ms >= 0 and math.isfinite(ms)):
        raise ValueError(f"{DEMO_PACE_ENV} must be a number of milliseconds >= 0, got {raw!r}")
    return ms / 1000


def cli(make_app: MakeApp, argv: list[str] | None, *, prog: str, what: str, port: int, name: str, models: str) -> None:
    """The `python -m fakes.<fake>` command line shared by both fakes."""
    import argparse

    p = argparse.ArgumentParser(prog=prog, description=f"Run a {what} on loopback.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=port)
    p.add_argument("--name", default=name)
    p.add_argument("--models", default=models, help="comma-separated model names")
    p.add_argument("--chunks", type=int, default=DEMO_CHUNKS,
                   help=f"content pieces per reply (default {DEMO_CHUNKS}, a word each)")
    p.add_argument("--chunk-delay", type=float, default=None,
                   help=f"seconds between stream frames (default ${DEMO_PACE_ENV} ms, else {DEMO_PACE_MS_DEFAULT} ms; "
                        "0 sends the whole stream at once)")
    p.add_argument("--quiet", action="store_true", help="no banner, no access log")
    a = p.parse_args(argv)
    if a.chunk_delay is None:
        try:
            a.chunk_delay = demo_pace_s(os.environ)
        except ValueError as exc:
            p.error(str(exc))
    behavior = Behavior(chunks=a.chunks, chunk_delay_s=a.chunk_delay)
    names = [m.strip() for m in a.models.split(",") if m.strip()]
    app = make_app(a.name, names, behavior, None)
    run_cli(app, a.host, a.port, quiet=a.quiet, banner=f"{what} {a.name!r} ({', '.join(names)})")
