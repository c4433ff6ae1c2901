"""The upstream seam every provider shares: one send, its timeouts, its headers.

Invariants:
- `send()` is the only place a provider request leaves the process; anything
  that fails there is before the client saw a byte, so it raises
  `UpstreamFailed` (retryable elsewhere), with the httpx error as its cause.
- A streaming 2xx/3xx answer comes back with its first chunk read and the
  rest still open (`Sent.rest`); the caller owns closing `Sent.response`.
- Timeouts come from the backend's spec, never from globals.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import httpx

from ..core.backend import BackendSpec
from .base import UpstreamFailed

# Response headers that belong to one hop, or that Django sets itself.
_DROP = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-authenticate",
        "proxy-authorization",
        "content-length",
        "content-encoding",
        "date",
        "server",
        "content-type",
    }
)


def provider_headers(spec: BackendSpec, forwarded: dict[str, str] | None = None) -> dict[str, str]:
    """JSON in, no compression, then the provider's auth and configured headers."""
    headers = {"content-type": "application/json", "accept-encoding": "identity", **(forwarded or {})}
    if spec.api_key:
        headers["authorization"] = "Bearer " + spec.api_key.reveal()
    for name, value in spec.headers:
        headers[name.lower()] = value
    return headers


def is_timeout(exc: BaseException) -> bool:
    """True for real timeouts. httpx-aiohttp maps a refused connection to
    ConnectTimeout; the aiohttp cause tells the two apart."""
    cause = exc.__cause__
    if isinstance(cause, (aiohttp.ServerTimeoutError, asyncio.TimeoutError)):
        return True
    if isinstance(cause, aiohttp.ClientConnectorError):
        return False
    return isinstance(exc, httpx.TimeoutException)


def timeouts(spec: BackendSpec) -> dict[str, float]:
    """The httpx timeout extension for one request to `spec`."""
    return {
        "connect": spec.connect_timeout,
        "read": spec.read_timeout,
        "write": spec.read_timeout,
        "pool": spec.connect_timeout,
    }


@dataclass(slots=True)
class Sent:
    """An upstream answer up to its first byte (stream) or in full."""

    response: httpx.Response
    first: bytes  # the whole body, or the first chunk of a stream
    rest: AsyncIterator[bytes] | None  # the rest of a streaming 2xx/3xx body; None once closed
    ms: float  # time to the first byte


async def send(
    transport: httpx.AsyncBaseTransport,
    spec: BackendSpec,
    url: str,
    *,
    content: bytes,
    headers: dict[str, str],
    stream: bool,
    method: str = "POST",
) -> Sent:
    """Send and read up to the first byte (stream) or the whole body.

    Everything that fails here is before the client saw a byte: UpstreamFailed.
    """
    started = time.perf_counter()
    request = httpx.Request(method, url, content=content, headers=headers, extensions={"timeout": timeouts(spec)})
    try:
        response = await transport.handle_async_request(request)
    except httpx.HTTPError as exc:
        if is_timeout(exc):
            raise UpstreamFailed(f"timeout connecting to {spec.name}", timeout=True) from exc
        raise UpstreamFailed(f"cannot connect to {spec.name}") from exc
    iterator = None
    try:
        if stream and response.status_code < 400:
            iterator = response.aiter_raw()
            try:
                first = await anext(iterator)
            except StopAsyncIteration:
                first = b""
        else:
            first = await response.aread()
            await response.aclose()
    except httpx.HTTPError as exc:
        await response.aclose()
        if is_timeout(exc):
            raise UpstreamFailed(f"timeout reading from {spec.name}", timeout=True) from exc
        raise UpstreamFailed(f"{spec.name} closed the connection before answering") from exc
    return Sent(response, first, iterator, (time.perf_counter() - started) * 1000.0)


def relay_headers(response: httpx.Response) -> list[tuple[str, str]]:
    """The upstream's end-to-end response headers, fit to relay to the client."""
    return [(k, v) for k, v in response.headers.items() if k not in _DROP]
