"""The web process's own limits: request heads and per-process admission.

Invariants:
- A request head (request line + headers) never grows past `head_bytes()` in
  memory: under uvicorn our protocol classes refuse it while it is still being
  parsed (431, or 414 for an over-long URL), before the ASGI app is called.
- Every server (uvicorn, daphne) is checked again in the ASGI entry point
  (`headers_over_limit`), before any Django work: more than
  ROUTER_MAX_HEADER_COUNT headers or ROUTER_MAX_HEADER_BYTES of names+values
  is a 431.
- At most ROUTER_MAX_CONCURRENT `/v1` requests run at once in one web process
  (`Admission`, a plain counter: one event loop per process, so no lock). Past
  it a request is answered at once with 503 + Retry-After instead of queueing
  behind the others. Probes (/livez, /readyz) and /metrics are never counted.
- Bodies still arriving hold no admission slot; together they may hold at
  most ROUTER_MAX_PENDING_BODY_BYTES of memory in one process (503 +
  Retry-After past it; router/frontends/direct.py PENDING). The surface's
  forms are spooled instead (memory while small, disk past 1 MiB), at most
  ROUTER_MAX_SPOOLED_BYTES of them at once (router/spool.py).

The values come from the environment, read on first use (not at import, and
not from Django settings: the protocol classes run before Django is set up).
A bad value fails loudly with the variable's name.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import h11
import orjson
from uvicorn.protocols.http import h11_impl

from router import gcwork

# The scope's `client` of a Unix-socket connection: no address (router/listen.py).
UNIX_CLIENT = ("", 0)

DEFAULTS = {
    "ROUTER_MAX_HEADER_COUNT": 100,
    "ROUTER_MAX_HEADER_BYTES": 32 * 1024,
    "ROUTER_MAX_CONCURRENT": 256,
    "ROUTER_SHED_RETRY_AFTER": 1,
    "ROUTER_HEADER_TIMEOUT": 10,
    "ROUTER_BODY_TIMEOUT": 60,
    "ROUTER_SEND_TIMEOUT": 30,
    "ROUTER_MAX_PENDING_BODY_BYTES": 256 * 1024 * 1024,
    "ROUTER_MAX_SPOOLED_BYTES": 4 * 1024**3,
}
# The request line (method, URL, version) may take this much on top of the headers.
REQUEST_LINE_BYTES = 8 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    max_header_count: int
    max_header_bytes: int
    max_concurrent: int  # 0: no admission limit
    retry_after_s: int
    # Seconds; 0 turns a deadline off (config/deadlines.py, and the protocols below).
    header_timeout_s: int = DEFAULTS["ROUTER_HEADER_TIMEOUT"]
    body_timeout_s: int = DEFAULTS["ROUTER_BODY_TIMEOUT"]
    send_timeout_s: int = DEFAULTS["ROUTER_SEND_TIMEOUT"]
    # Bytes of /v1 bodies still arriving, over the whole process (they hold
    # no admission slot); 0: no bound (router/frontends/direct.py PENDING).
    max_pending_body_bytes: int = DEFAULTS["ROUTER_MAX_PENDING_BODY_BYTES"]
    # Bytes of the surface's forms spooled (memory and disk) while they are
    # received and served, over the whole process; 0: no bound (router/spool.py).
    max_spooled_bytes: int = DEFAULTS["ROUTER_MAX_SPOOLED_BYTES"]

    def head_bytes(self) -> int:
        """Raw bytes a whole request head may take: headers, their `: ` and
        CRLFs, and the request line."""
        return self.max_header_bytes + 4 * self.max_header_count + REQUEST_LINE_BYTES


def _env_int(env: Mapping[str, str], name: str, *, minimum: int) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return DEFAULTS[name]
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {raw!r}.")
    return value


def limits_from(env: Mapping[str, str]) -> Limits:
    return Limits(
        max_header_count=_env_int(env, "ROUTER_MAX_HEADER_COUNT", minimum=1),
        max_header_bytes=_env_int(env, "ROUTER_MAX_HEADER_BYTES", minimum=1024),
        max_concurrent=_env_int(env, "ROUTER_MAX_CONCURRENT", minimum=0),
        retry_after_s=_env_int(env, "ROUTER_SHED_RETRY_AFTER", minimum=0),
        header_timeout_s=_env_int(env, "ROUTER_HEADER_TIMEOUT", minimum=0),
        body_timeout_s=_env_int(env, "ROUTER_BODY_TIMEOUT", minimum=0),
        send_timeout_s=_env_int(env, "ROUTER_SEND_TIMEOUT", minimum=0),
        max_pending_body_bytes=_env_int(env, "ROUTER_MAX_PENDING_BODY_BYTES", minimum=0),
        max_spooled_bytes=_env_int(env, "ROUTER_MAX_SPOOLED_BYTES", minimum=0),
    )


@functools.cache
def limits() -> Limits:
    """This process's limits (its environment, read once)."""
    return limits_from(os.environ)


def uvicorn_args(env: Mapping[str, str] | None = None) -> list[str]:
    """The uvicorn options that enforce the head limits while parsing, for a
    server started with `env` (default: this process's environment)."""
    impl = "HttpToolsProtocol" if importlib.util.find_spec("httptools") else "H11Protocol"
    head = limits_from(os.environ if env is None else env).head_bytes()
    return ["--http", f"config.server:{impl}", "--h11-max-incomplete-event-size", str(head)]


# -- garbage collection -----------------------------------------------------


def settle_gc() -> None:
    """Collect once and move everything alive into the permanent generation.

    Called when the process has imported and set up what it keeps (the ASGI
    module's import, the end of lifespan startup): those objects are never
    garbage, but every full collection used to walk all of them (Django,
    Ninja, pydantic, prometheus…) — ~100-250 ms a pass on the event loop,
    the router's whole latency tail (docs/performance.md)."""
    gcwork.settle()


def share_the_interpreter() -> None:
    """A shorter GIL switch interval for the web process (1 ms; CPython's is 5 ms).

    A snapshot refresh (and Django's sync work) runs in a worker thread; while
    it holds the GIL the event loop, and every request on it, waits until the
    thread is made to switch. At 5 ms that wait was the latency tail of a
    request loop during a burst of changes (issue 13); at 1 ms the loop gets
    the interpreter back five times as often. It costs nothing while the loop
    is the only thread that wants to run. ``ROUTER_SWITCH_INTERVAL_MS``
    changes it (0 keeps CPython's)."""
    ms = float(os.environ.get("ROUTER_SWITCH_INTERVAL_MS", "1") or 0)
    if ms > 0:
        sys.setswitchinterval(ms / 1000.0)


# -- OpenAI-shaped refusals --------------------------------------------------


def error_body(message: str, code: str, type_: str = "invalid_request_error") -> bytes:
    """The OpenAI error shape (as router.core.errors renders it)."""
    return orjson.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}})


def headers_too_large_body(lim: Limits) -> bytes:
    return error_body(
        f"The request headers are too large: at most {lim.max_header_count} headers "
        f"and {lim.max_header_bytes} bytes of names and values are accepted.",
        "request_headers_too_large",
    )


def uri_too_long_body() -> bytes:
    return error_body(f"The request URL is longer than {REQUEST_LINE_BYTES} bytes.", "uri_too_long")


def bad_host_body(count: int) -> bytes:
    if count:
        return error_body("The request has more than one Host header.", "duplicate_host")
    return error_body("An HTTP/1.1 request must have a Host header.", "missing_host")


def head_timeout_body(lim: Limits) -> bytes:
    return error_body(f"The request head did not arrive within {lim.header_timeout_s} s.", "request_timeout")


def body_timeout_body(lim: Limits) -> bytes:
    return error_body(f"The request body did not arrive within {lim.body_timeout_s} s.", "request_timeout")


def overloaded_body() -> bytes:
    return error_body(
        "The router is at its concurrent request limit; retry shortly.", "router_overloaded", "server_error"
    )


def headers_over_limit(headers, lim: Limits) -> bool:
    """True when an ASGI scope's headers pass the count or byte limit."""
    if len(headers) > lim.max_header_count:
        return True
    return sum(len(name) + len(value) for name, value in headers) > lim.max_header_bytes


async def send_refusal(send, status: int, body: bytes, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    *extra],
    })
    await send({"type": "http.response.body", "body": body})


async def send_overloaded(send, lim: Limits) -> None:
    await send_refusal(send, 503, overloaded_body(), ((b"retry-after", str(lim.retry_after_s).encode()),))


# -- per-process admission ---------------------------------------------------


class Admission:
    """Concurrent /v1 requests in this process. Only the event loop's thread
    touches it, so `+= 1` needs no lock."""

    __slots__ = ("in_flight", "shed")

    def __init__(self) -> None:
        self.in_flight = 0
        self.shed = 0

    def try_enter(self, limit: int) -> bool:
        if limit and self.in_flight >= limit:
            self.shed += 1
            return False
        self.in_flight += 1
        return True

    def leave(self) -> None:
        self.in_flight -= 1


admission = Admission()


# -- uvicorn protocol classes ------------------------------------------------


def _raw_response(status: int, reason: bytes, body: bytes) -> bytes:
    return b"".join([
        b"HTTP/1.1 %d %s\r\n" % (status, reason),
        b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body),
        body,
    ])


class _HeadTooLarge(Exception):
    pass


def _httptools_base():
    # Imported lazily: httptools is optional for uvicorn (h11 is the fallback).
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    return HttpToolsProtocol


def head_deadline(loop: asyncio.AbstractEventLoop, late) -> asyncio.TimerHandle | None:  # type: ignore[no-untyped-def]
    """The timer of one request head (a connection's first from its opening,
    later ones from their first byte; uvicorn's keep-alive timeout covers the
    idle time between requests). None when ROUTER_HEADER_TIMEOUT is 0."""
    seconds = limits().header_timeout_s
    return loop.call_later(seconds, late) if seconds > 0 else None


class HeadDeadline:
    """A connection's head timer (`head_deadline`), for a uvicorn protocol
    class: armed when the connection opens, cancelled when it is lost; the
    protocol re-arms it for each later head and calls `_head_late` on expiry."""

    _head_timer: asyncio.TimerHandle | None = None
    loop: asyncio.AbstractEventLoop

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        super().connection_made(transport)  # type: ignore[misc]
        self._head_timer = head_deadline(self.loop, self._head_late)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family == socket.AF_UNIX:
            # A client of the node's Unix socket: no address, said so in the
            # scope ("" — IP rules do not apply, router/core/ipnets.py). Any
            # other connection without an address stays None, which the
            # allow-lists refuse (router/admission.py peer_of).
            self.client = UNIX_CLIENT

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)  # type: ignore[misc]

    def _head_late(self) -> None:
        raise NotImplementedError


class HttpToolsProtocol(HeadDeadline, _httptools_base() if importlib.util.find_spec("httptools") else object):  # type: ignore[misc]
    """uvicorn's httptools protocol, refusing an over-large head while parsing.

    httptools (llhttp) has no header limits of its own: it would gather a
    20 MB head and hand it to the app. Here each header is counted as it is
    parsed, and raw head bytes are counted per received chunk (so one giant
    header, which httptools buffers before calling `on_header`, is cut off
    too), and the connection gets a 431 and is closed."""

    _refusal: bytes | None = None
    _head_open = False
    _head_raw = 0
    _head_count = 0
    _head_size = 0
    _hosts = 0

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_open, self._head_raw, self._head_count, self._head_size, self._hosts = True, 0, 0, 0, 0
        if self._head_timer is None:  # the next request on a kept-alive connection
            self._head_timer = head_deadline(self.loop, self._head_late)

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > REQUEST_LINE_BYTES:
            self._refusal = _raw_response(414, b"URI Too Long", uri_too_long_body())
            raise _HeadTooLarge

    def on_header(self, name: bytes, value: bytes) -> None:
        lim = limits()
        self._head_count += 1
        self._head_size += len(name) + len(value)
        if self._head_count > lim.max_header_count or self._head_size > lim.max_header_bytes:
            self._refusal = _raw_response(431, b"Request Header Fields Too Large", headers_too_large_body(lim))
            raise _HeadTooLarge
        if len(name) == 4 and name.lower() == b"host":
            self._hosts += 1
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head_open = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        # RFC 9112 §3.2: a 1.1 request without Host, or with two, is a 400 —
        # two would let the ingress and a proxy in front read different hosts.
        if self._hosts > 1 or (self._hosts == 0 and self.parser.get_http_version() == "1.1"):
            self._refusal = _raw_response(400, b"Bad Request", bad_host_body(self._hosts))
            raise _HeadTooLarge
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is not before:  # a new request (not an upgrade): its response goes through HeadHeld
            self.cycle.scope["router.transport"] = self.transport  # type: ignore[typeddict-unknown-key]
            self.cycle.transport = HeadHeld(self.transport, self.loop)  # type: ignore[assignment]

    def _head_late(self) -> None:
        """No whole request head within ROUTER_HEADER_TIMEOUT: 408, closed."""
        self._head_timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined head behind an answer still going: close after that answer.
            self.cycle.keep_alive = False
        elif not self.transport.is_closing():
            self.transport.write(_raw_response(408, b"Request Timeout", head_timeout_body(limits())))
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:
            return
        super().data_received(data)
        if self._head_open and self._refusal is None:
            self._head_raw += len(data)
            lim = limits()
            if self._head_raw > lim.head_bytes():
                self._refusal = _raw_response(431, b"Request Header Fields Too Large", headers_too_large_body(lim))
                self._write_refusal()

    def send_400_response(self, msg: str) -> None:
        # uvicorn answers every parser error (ours included) through here.
        if self._refusal is None:
            super().send_400_response(msg)
        else:
            self._write_refusal()

    def _write_refusal(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(self._refusal)
            self.transport.close()


class HeadHeld:
    """One request's view of its connection's transport, as uvicorn's response
    cycle writes to it: the first write (the response head) is held until the
    next one, and both go out in one `writelines` — one send syscall instead
    of two for a whole answer, whose body the app sends right after its head.
    A head with nothing after it in the same loop pass (a stream waiting for
    its first chunk) is written on the next pass. Everything else is the
    transport's own (`__getattr__`); `close` writes a held head first.

    Measured with py-spy under load: each of the two writes of a small answer
    was ~7 % of the web process's CPU (on loopback the kernel's TCP work for
    both ends is charged to the writer's syscall)."""

    __slots__ = ("_first", "_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._first = True
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.writelines((held, data))
        elif self._first:
            self._first = False
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class H11Protocol(HeadDeadline, h11_impl.H11Protocol):
    """uvicorn's h11 protocol: h11 caps a head that is still arriving at
    --h11-max-incomplete-event-size (see `uvicorn_args`) and hints 431, which
    uvicorn would answer with a plain-text 400. A head that arrives whole is
    parsed whatever its size: the ASGI entry point's count and byte checks
    catch it. h11 itself refuses a 1.1 request without Host or with two; the
    head deadline is ours, as in `HttpToolsProtocol`."""

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:
            if self._head_timer is None and data:  # a head has begun to arrive
                self._head_timer = head_deadline(self.loop, self._head_late)
        else:  # the head is whole
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            if self.cycle is not None:
                self.cycle.scope["router.transport"] = self.transport  # type: ignore[typeddict-unknown-key]

    def _head_late(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.transport.write(_raw_response(408, b"Request Timeout", head_timeout_body(limits())))
            self.transport.close()

    def send_400_response(self, msg: str) -> None:
        exc = sys.exc_info()[1]
        if not (isinstance(exc, h11.RemoteProtocolError) and exc.error_status_hint == 431):
            super().send_400_response(msg)
            return
        body = headers_too_large_body(limits())
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        for event in (h11.Response(status_code=431, headers=headers, reason=b"Request Header Fields Too Large"),
                      h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()
