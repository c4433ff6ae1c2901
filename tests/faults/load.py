"""A steady request loop in a background thread, classifying every outcome.

Each request ends in exactly one bucket:
- ok:     200 and a complete answer (a stream ends with `data: [DONE]`);
- failed: an answer the client can act on — an OpenAI-shaped error status,
          or a stream that ends with an error event;
- lost:   no usable answer at all — connection refused or reset, a timeout,
          a stream cut without an error event, a body that is not JSON.

A lost request is the one a gateway must never produce: the client cannot
tell what happened to it.

`stop_sending()` lets the requests in flight run to their end and starts no
new one (a node being stopped: its balancer sends new requests elsewhere);
`unanswered` counts the requests sent whose status has not arrived yet.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import httpx
import orjson


@dataclass
class Counts:
    sent: int = 0
    ok: int = 0
    failed: int = 0
    lost: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    lost_reasons: dict[str, int] = field(default_factory=dict)
    ok_times: list[float] = field(default_factory=list)  # monotonic end times of ok requests
    took: list[tuple[float, float]] = field(default_factory=list)  # (end time, seconds) of every request

    def p99_between(self, start: float, end: float) -> float | None:
        """The 99th percentile of how long the requests that ended in [start, end] took."""
        durations = sorted(s for t, s in self.took if start <= t <= end)
        return durations[min(len(durations) - 1, int(len(durations) * 0.99))] if durations else None


class Load:
    def __init__(self, url: str, *, model: str = "m", stream: bool = False, concurrency: int = 8,
                 headers: dict[str, str] | None = None, timeout: float = 30.0) -> None:
        self.url = url
        self.model = model
        self.stream = stream
        self.concurrency = concurrency
        self.headers = headers or {}
        self.timeout = timeout
        self.counts = Counts()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._unanswered = 0

    def __enter__(self) -> Load:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="fault-load", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> Counts:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout + 30)
            self._thread = None
        return self.counts

    def stop_sending(self) -> None:
        """No new request from now on; those in flight go on to their end."""
        with self._lock:
            self._stop.set()

    @property
    def unanswered(self) -> int:
        with self._lock:
            return self._unanswered

    def _begin(self) -> bool:
        """One more request, unless told to stop (checked and counted under
        the lock: after `stop_sending()` every request sent is counted)."""
        with self._lock:
            if self._stop.is_set():
                return False
            self._unanswered += 1
            return True

    def _answered(self, pending: list[int]) -> None:
        if pending:
            pending.clear()
            with self._lock:
                self._unanswered -= 1

    def ok_after(self, t: float) -> int:
        with self._lock:
            return sum(1 for x in self.counts.ok_times if x > t)

    def _add(self, bucket: str, status: int | None = None, reason: str | None = None) -> None:
        with self._lock:
            c = self.counts
            c.sent += 1
            setattr(c, bucket, getattr(c, bucket) + 1)
            if status is not None:
                c.statuses[status] = c.statuses.get(status, 0) + 1
            if reason is not None:
                c.lost_reasons[reason] = c.lost_reasons.get(reason, 0) + 1
            if bucket == "ok":
                c.ok_times.append(time.monotonic())

    async def _main(self) -> None:
        limits = httpx.Limits(max_connections=self.concurrency * 2)
        async with httpx.AsyncClient(timeout=self.timeout, limits=limits) as client:
            await asyncio.gather(*(self._worker(client) for _ in range(self.concurrency)))

    async def _worker(self, client: httpx.AsyncClient) -> None:
        body = {"model": self.model, "messages": [{"role": "user", "content": "hi"}], "stream": self.stream}
        while self._begin():
            began = time.monotonic()
            pending = [1]  # this request's status has not arrived yet
            try:
                if self.stream:
                    await self._one_stream(client, body, pending)
                else:
                    await self._one(client, body, pending)
            except httpx.HTTPError as exc:
                self._add("lost", reason=type(exc).__name__)
                await asyncio.sleep(0.05)  # a refused connection fails at once: do not spin
            finally:
                self._answered(pending)
            ended = time.monotonic()
            with self._lock:
                self.counts.took.append((ended, ended - began))

    async def _one(self, client: httpx.AsyncClient, body: dict, pending: list[int]) -> None:
        response = await client.post(self.url + "/v1/chat/completions", json=body, headers=self.headers)
        self._answered(pending)
        try:
            data = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            self._add("lost", response.status_code, reason="not-json")
            return
        if response.status_code == 200 and data.get("choices"):
            self._add("ok", 200)
        elif response.status_code >= 400 and isinstance(data.get("error"), dict):
            self._add("failed", response.status_code)
        else:
            self._add("lost", response.status_code, reason="unexpected-body")

    async def _one_stream(self, client: httpx.AsyncClient, body: dict, pending: list[int]) -> None:
        async with client.stream("POST", self.url + "/v1/chat/completions", json=body,
                                 headers=self.headers) as response:
            self._answered(pending)
            raw = b"".join([chunk async for chunk in response.aiter_bytes()])
        if response.status_code != 200:
            try:
                data = orjson.loads(raw)
            except orjson.JSONDecodeError:
                data = None
            bucket = "failed" if isinstance(data, dict) and isinstance(data.get("error"), dict) else "lost"
            self._add(bucket, response.status_code, reason=None if bucket == "failed" else "unexpected-body")
            return
        if raw.rstrip().endswith(b"data: [DONE]"):
            self._add("ok", 200)
        elif b'"error"' in raw.rsplit(b"data: ", 1)[-1]:
            self._add("failed", 200)  # ended with an error event: the client knows
        else:
            self._add("lost", 200, reason="stream-cut")
