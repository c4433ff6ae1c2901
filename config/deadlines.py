"""The deadlines of one `/v1` request: its body must arrive, its client must read.

A client holds a connection, a coroutine and, once admitted, a share of the
process's and a backend's capacity. It may only keep them while it does its
part of the exchange:

- **Body**: the whole request body must arrive within `ROUTER_BODY_TIMEOUT`
  seconds of the request head. Past it the request is answered 408
  `request_timeout` (the connection is closed) — it never reached admission,
  so it held no admission slot while it dripped (config/asgi.py admits only
  requests whose body is complete).
- **Send**: one write to the client (a response head, a body, one stream
  chunk) may wait at most `ROUTER_SEND_TIMEOUT` seconds for the client to
  read. Past it the connection is aborted: uvicorn reports a disconnect, and
  the request's own disconnect handling cancels the upstream and frees the
  backend slot, exactly as when a client goes away.

Invariants:
- No timer per request or per chunk: each `Guard` holds one absolute
  deadline (0.0: none running), set and cleared with a float store around the
  awaits it bounds; one sweeper task per event loop visits the live guards
  every `SWEEP_S` and expires the late ones. So a deadline is met up to
  `SWEEP_S` late, and the hot path pays two attribute stores per write.
- A guard is in its sweeper's set from `Guard(...)` to `close()`, which the
  ASGI entry point calls in `finally`; nothing else can grow the set.
- Expiring a body cancels the request's task (`expired` says why, so the
  entry point tells it from a server shutdown and answers 408); expiring a
  send aborts the transport when the server put it in the scope
  (config/server.py's protocols do, as `router.transport`), else cancels the
  task.
"""

from __future__ import annotations

import asyncio
from typing import Any

# How often the sweeper looks. A deadline of seconds is met within this.
SWEEP_S = 0.5

BODY = "body"
SEND = "send"


class Sweeper:
    """The live guards of one event loop, and the task that expires the late."""

    __slots__ = ("guards", "loop", "task")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.guards: set[Guard] = set()
        self.task: asyncio.Task | None = None

    def add(self, guard: Guard) -> None:
        self.guards.add(guard)
        if self.task is None or self.task.done():
            self.task = self.loop.create_task(self._run(), name="router-deadlines")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            self.sweep(self.loop.time())

    def sweep(self, now: float) -> None:
        late = [g for g in self.guards if 0.0 < g.deadline < now]
        for guard in late:
            guard.expire()


_sweeper: Sweeper | None = None


def sweeper() -> Sweeper:
    """The running loop's sweeper (a new loop — a test's — gets a new one)."""
    global _sweeper
    loop = asyncio.get_running_loop()
    if _sweeper is None or _sweeper.loop is not loop:
        _sweeper = Sweeper(loop)
    return _sweeper


class Guard:
    """One request's `receive` and `send`, each bounded by its deadline."""

    __slots__ = ("_receive", "_send", "_send_s", "_sweeper", "answered", "deadline", "expired", "reading", "scope",
                 "task")

    def __init__(self, scope: dict[str, Any], receive, send, *, body_s: float, send_s: float) -> None:
        sw = sweeper()
        task = asyncio.current_task()
        assert task is not None
        self.scope = scope
        self.task = task
        self._receive = receive
        self._send = send
        self._send_s = send_s
        self._sweeper = sw
        self.reading = True  # until the body's last message
        self.answered = False  # a message was sent to the client
        self.expired: str | None = None  # BODY or SEND once a deadline passed
        self.deadline = sw.loop.time() + body_s if body_s > 0 else 0.0
        sw.add(self)

    async def receive(self) -> dict[str, Any]:
        message = await self._receive()
        if self.reading and (message["type"] != "http.request" or not message.get("more_body", False)):
            self.reading = False
            self.deadline = 0.0
        return message

    async def send(self, message: dict[str, Any]) -> None:
        self.reading = False  # an answer ends the body's time (a refusal may leave it unread)
        self.answered = True
        if self._send_s > 0:
            self.deadline = self._sweeper.loop.time() + self._send_s
            try:
                await self._send(message)
            finally:
                self.deadline = 0.0
        else:
            await self._send(message)

    def expire(self) -> None:
        self.deadline = 0.0
        if self.reading:
            self.expired = BODY
            self.task.cancel()
            return
        self.expired = SEND
        transport = self.scope.get("router.transport")
        if transport is not None:
            transport.abort()  # the client's disconnect, as the server reports it
        else:
            self.task.cancel()

    def close(self) -> None:
        self.deadline = 0.0
        self._sweeper.guards.discard(self)
