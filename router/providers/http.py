"""The upstream seam every provider shares: one send, its timeouts, its headers.

Invariants:
- `send()` is the only place a provider request leaves the process; anything
  that fails there is before the client saw a byte, so it raises
  `UpstreamFailed` (retryable elsewhere), with the httpx error as its cause.
- A streaming 2xx/3xx answer comes back with its first chunk read and the
  rest still open (`Sent.rest`), and so does a long whole 2xx answer the
  caller will relay as it comes (`relay_over`); the caller owns closing
  `Sent.response`.
- Timeouts come from the backend's spec, never from globals.
- Nothing a client sends can make the send itself fail: a forwarded header
  value that is not plain ASCII (HTTP has no charset for header values) is
  dropped, never fatal; a configured one is sent as UTF-8.
- A URL's userinfo never rides in the request line: without an `api_key` it
  becomes HTTP Basic auth, with one the `api_key` is the Authorization sent.
- A whole (non-streaming or error) answer is read in chunks and refused
  (`UpstreamResponseTooLarge`, 502) as soon as it passes the limit, so no
  more than the limit is ever held.
- An answer's head is capped on every path (plain.MAX_RESPONSE_HEADERS,
  plain.MAX_RESPONSE_HEAD_BYTES): past the cap the attempt fails as
  `UpstreamFailed(error=UpstreamResponseTooLarge)`, and so does a 1xx the
  client passed on (a 101) as a plain `UpstreamFailed`; either connection is
  dropped, never pooled.
- A 2xx answer is never passed on as a success when it is not what the
  caller `expect`s (SSE, or JSON: its media type, a whole body's first byte)
  or its body was cut short: `UpstreamFailed(error=UpstreamBadResponse)`.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp
import httpx
import yarl
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from httpx_aiohttp.transport import AiohttpResponseStream, AiohttpTransport, map_aiohttp_exceptions

from ..core.backend import BackendSpec
from ..core.errors import UpstreamBadResponse, UpstreamResponseTooLarge
from ..spool import Upload
from .base import UpstreamFailed
from .plain import MAX_RESPONSE_HEAD_BYTES, MAX_RESPONSE_HEADERS, PlainPool, PlainStream, ResponseHeadTooLarge

DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # server.max_response_bytes
JSON = "application/json"  # what a 2xx answer may be (`send(expect=…)`)
SSE = "text/event-stream"

# The upstream answer headers a client is given: what the OpenAI and Anthropic
# SDKs (and the code of their users) read, and nothing else (issue 34). A name
# ending in `*` is a prefix. Everything else an upstream sends stays here:
# Set-Cookie and CORS (Access-Control-*) above all, since the router's own
# origin serves the dashboard and an AppProxy replica is a user's workload;
# hop-by-hop, caching and server headers too. Content-Type and Content-Length
# are the router's own. docs/mixed-providers.md lists the same table.
RELAYED_HEADERS: dict[str, str] = {
    "x-request-id": "the OpenAI SDK's `_request_id`; vLLM sends it (--enable-request-id-headers)",
    "request-id": "the Anthropic SDK's `_request_id`",
    "retry-after": "both SDKs wait this long before they retry",
    "retry-after-ms": "the same in milliseconds (both SDKs)",
    "x-should-retry": "both SDKs retry, or not, as it says",
    "openai-*": "OpenAI's: -organization, -project, -version, -processing-ms, "
    "-poll-after-ms (the SDK's polling helpers)",
    "x-ratelimit-*": "the rate-limit state of OpenAI and most OpenAI-compatible APIs",
    "anthropic-*": "Anthropic's: -ratelimit-*, -organization-id, -workspace-id",
}
_RELAYED = frozenset(name for name in RELAYED_HEADERS if not name.endswith("*"))
_RELAYED_PREFIXES = tuple(name[:-1] for name in RELAYED_HEADERS if name.endswith("*"))


def provider_headers(spec: BackendSpec, forwarded: dict[str, str] | None = None) -> dict[str, str]:
    """JSON in, no compression, then the provider's auth and configured headers.

    A forwarded (client) value that is not ASCII is dropped: the client's
    bytes have no agreed charset, and the upstream may refuse them."""
    headers = {"content-type": "application/json", "accept-encoding": "identity"}
    if forwarded:
        for name, value in forwarded.items():
            if value.isascii():
                headers[name] = value
    if spec.api_key:
        headers["authorization"] = "Bearer " + spec.api_key.reveal()
    for name, value in spec.headers:
        headers[name.lower()] = value
    return headers


def bearer_probe_headers(spec: BackendSpec) -> dict[str, str]:
    """Probe headers of the kinds that authenticate with `Authorization: Bearer`."""
    headers = {"authorization": "Bearer " + spec.api_key.reveal()} if spec.api_key else {}
    for name, value in spec.headers:
        headers[name.lower()] = value
    return headers


def _wire_headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    """Headers as bytes: ASCII as is, anything else (configured) as UTF-8
    (httpx would raise UnicodeEncodeError on a non-ASCII str)."""
    return [(name.encode(), value.encode()) for name, value in headers.items()]


def _without_userinfo(url: str, headers: dict[str, str]) -> str:
    """`url` minus `user:password@`, moved into `headers` as Basic auth unless
    an Authorization (the backend's api_key) is already there. aiohttp refuses
    a request with both; and a password has no business in a request line."""
    if "@" not in url:
        return url
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    if "authorization" not in headers:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        headers["authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=netloc))


@functools.lru_cache(maxsize=4096)
def _parsed(url: str) -> httpx.URL:
    """The parsed URL (immutable), once per URL: the URLs come from the
    config, and parsing one was ~5 % of the router's CPU per request."""
    return httpx.URL(url)


@functools.lru_cache(maxsize=4096)
def _target(url: str) -> yarl.URL:
    """The URL aiohttp gets, as the httpx path hands it over (httpx's
    normalised form), parsed by yarl once."""
    return yarl.URL(str(_parsed(url)))


class LeanAiohttpTransport(AiohttpTransport):
    """httpx-aiohttp's transport plus `send_direct`, the hot path's entry:
    it takes what `handle_async_request` reads from an `httpx.Request`
    (method, URL, headers, body, the timeout extension) and makes the same
    aiohttp call, with the same exception mapping and the same
    `httpx.Response`, without building an `httpx.Request` per request (its
    URL, header normalisation and default headers were ~8 % of the router's
    CPU). aiohttp adds Host and Content-Length itself, as httpx did.
    `handle_async_request` is unchanged for everything else.

    A plain-http URL without a proxy, unix socket or local address goes to
    this transport's own HTTP/1.1 pool instead (router.providers.plain: the
    same httpx answer and errors, a third of aiohttp's CPU per request)."""

    _plain: PlainPool | None = None

    def get_client(self) -> aiohttp.ClientSession:
        """httpx-aiohttp's session (the same connector), without a cookie jar.

        The session and its connections are shared by every client of the
        router: aiohttp's default jar would keep a cookie one upstream answer
        set (for a host name; it refuses bare IPs) and send it with every later
        request to that host, whoever made it. A router keeps no upstream's
        cookie, and relays none to its client (`RELAYED_HEADERS`)."""
        if self.client is not None or self.uds:
            return super().get_client()
        limit = {"limit": self.limits.max_connections} if self.limits.max_connections is not None else {}
        connector = aiohttp.TCPConnector(
            keepalive_timeout=self.limits.keepalive_expiry,
            ssl=self.ssl_context,
            local_addr=(self.local_address, 0) if self.local_address else None,
            **limit,  # type: ignore[arg-type]
        )
        return aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.DummyCookieJar(), max_headers=MAX_RESPONSE_HEADERS
        )

    async def send_direct(
        self, method: str, url: yarl.URL, headers: dict[str, str], content: bytes | Upload,
        timeout: dict[str, float],
    ) -> httpx.Response:
        if isinstance(content, Upload):  # a spooled body (router/spool.py): aiohttp writes it as the socket drains
            headers = {**headers, "content-length": str(content.length)}
        elif url.scheme == "http" and method != "HEAD" and self.proxy is None and not self.uds \
                and not self.local_address:
            pool = self._plain
            if pool is None or pool.loop is not asyncio.get_running_loop():
                limits = self.limits
                pool = self._plain = PlainPool(
                    max_connections=limits.max_connections,
                    max_keepalive=limits.max_keepalive_connections,
                    keepalive_expiry=limits.keepalive_expiry,
                )
            return await pool.send(method, url, headers, content, timeout)
        if not isinstance(self.client, aiohttp.ClientSession):
            self.client = self.get_client()
        proxy = self.proxy
        with map_aiohttp_exceptions():
            response = await self.client.request(
                method=method,
                url=url,
                headers=headers,
                data=content or None,
                allow_redirects=False,
                auto_decompress=False,
                compress=False,
                timeout=aiohttp.ClientTimeout(
                    sock_connect=timeout.get("connect"), sock_read=timeout.get("read"), connect=timeout.get("pool")
                ),
                server_hostname=None,
                proxy=str(proxy.url) if proxy else None,
                proxy_auth=aiohttp.BasicAuth(proxy.auth[0], proxy.auth[1]) if proxy and proxy.auth else None,
                proxy_headers=proxy.headers if proxy else None,
                max_headers=MAX_RESPONSE_HEADERS,  # and aiohttp's own 8190 bytes a line
            ).__aenter__()
        extensions = {"http_version": b"HTTP/1.1"}
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode()
        return httpx.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_AiohttpStream(response),
            extensions=extensions,
        )


    async def aclose(self) -> None:
        if self._plain is not None:
            self._plain.close()
            self._plain = None
        await super().aclose()


class _AiohttpStream(AiohttpResponseStream):
    """httpx-aiohttp's response stream, with the aiohttp response kept at hand
    for `read_capped`'s whole read of an answer of declared length."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        super().__init__(response)
        self.response = response


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
    content: bytes | Upload,
    headers: dict[str, str],
    stream: bool,
    method: str = "POST",
    max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    relay_over: int | None = None,
    expect: str | None = None,
) -> Sent:
    """Send and read up to the first byte (stream) or the whole body (at most
    `max_bytes` of it: UpstreamResponseTooLarge beyond). With `relay_over`, a
    2xx whole body longer than that (or of undeclared length) is left open
    like a stream, for the caller to relay without holding it. With `expect`
    (JSON or SSE), a 2xx answer of another media type is a bad answer.

    Everything else that fails here is before the client saw a byte: UpstreamFailed
    (`UpstreamBadResponse` for an answer cut short or of the wrong media type).
    """
    started = time.perf_counter()
    try:
        url = _without_userinfo(url, headers)
        if isinstance(transport, LeanAiohttpTransport):
            response = await transport.send_direct(method, _target(url), headers, content, timeouts(spec))
        else:
            if isinstance(content, Upload):
                headers = {**headers, "content-length": str(content.length)}
            request = httpx.Request(
                method, _parsed(url), content=content, headers=_wire_headers(headers),
                extensions={"timeout": timeouts(spec)},
            )
            response = await transport.handle_async_request(request)
    except ResponseHeadTooLarge as exc:
        raise _head_too_large(spec.name, str(exc)) from exc
    except httpx.RemoteProtocolError as exc:
        raise UpstreamFailed(f"{spec.name} gave no usable HTTP answer ({exc})") from exc
    except httpx.HTTPError as exc:
        if is_timeout(exc):
            raise UpstreamFailed(f"timeout connecting to {spec.name}", timeout=True) from exc
        raise UpstreamFailed(f"cannot connect to {spec.name}") from exc
    except Exception as exc:  # e.g. aiohttp's ValueError for a URL it cannot use
        if _aiohttp_refused_head(exc):
            raise _head_too_large(spec.name, "a header line or the count past aiohttp's limits") from exc
        raise UpstreamFailed(f"cannot send to {spec.name} ({type(exc).__name__})") from exc
    if not isinstance(response.stream, PlainStream):  # (the plain client checked as it read)
        await _check_head(response, spec.name)
    if expect is not None and 200 <= response.status_code < 300 and not is_media(response, expect):
        await response.aclose()
        shown = response.headers.get("content-type", "no content type")[:100]
        raise UpstreamFailed(
            f"{spec.name} answered {response.status_code} with {shown}, not {expect}", error=UpstreamBadResponse
        )
    iterator = None
    try:
        if (stream and response.status_code < 400) or (
            relay_over is not None and 200 <= response.status_code < 300 and not _fits(response, relay_over)
        ):
            iterator = response.aiter_raw()
            try:
                first = await anext(iterator)
            except StopAsyncIteration:
                first = b""
        else:
            try:
                first = await read_capped(response, max_bytes, spec.name)
            finally:
                await response.aclose()
    except httpx.HTTPError as exc:
        await response.aclose()
        if is_timeout(exc):
            raise UpstreamFailed(f"timeout reading from {spec.name}", timeout=True) from exc
        raise UpstreamFailed(f"{spec.name} cut its answer short: {exc}", error=UpstreamBadResponse) from exc
    except BaseException:
        await response.aclose()  # the connection is never left open (idempotent)
        raise
    if expect == JSON and iterator is None and 200 <= response.status_code < 300 \
            and first.lstrip()[:1] not in (b"{", b"["):
        raise UpstreamFailed(f"{spec.name} answered {response.status_code} with a body that is not JSON",
                             error=UpstreamBadResponse)
    return Sent(response, first, iterator, (time.perf_counter() - started) * 1000.0)


def is_media(response: httpx.Response, expect: str) -> bool:
    """The answer's Content-Type is `expect` (parameters aside); JSON also as
    `application/*+json`."""
    media = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media == expect:
        return True
    return expect == JSON and media.startswith("application/") and media.endswith("+json")


def _head_too_large(name: str, why: str) -> UpstreamFailed:
    return UpstreamFailed(
        f"the answer head of {name} is larger than the router reads ({why})", error=UpstreamResponseTooLarge
    )


def _aiohttp_refused_head(exc: BaseException) -> bool:
    """aiohttp refused an answer's head for its size: a line past its
    max_field_size / max_line_size, or more than `max_headers` headers."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, LineTooLong) or (isinstance(cause, BadHttpMessage) and "Too many headers" in cause.message):
            return True
        cause = cause.__cause__
    return False


async def _check_head(response: httpx.Response, name: str) -> None:
    """The plain client's head rules for an answer another client read (aiohttp
    held at most `max_headers` lines of 8190 bytes): no 1xx passed on as the
    answer (aiohttp passes a 101), the head's size within the cap."""
    raw = response.headers.raw
    failure = None
    if response.status_code < 200:
        failure = UpstreamFailed(f"{name} answered {response.status_code} to a plain request")
    elif len(raw) > MAX_RESPONSE_HEADERS:
        failure = _head_too_large(name, f"more than {MAX_RESPONSE_HEADERS} headers")
    elif sum(len(k) + len(v) + 4 for k, v in raw) > MAX_RESPONSE_HEAD_BYTES:
        failure = _head_too_large(name, f"more than {MAX_RESPONSE_HEAD_BYTES} bytes")
    if failure is not None:
        if isinstance(response.stream, _AiohttpStream):
            response.stream.response.close()  # the connection, not back to the pool
        await response.aclose()
        raise failure


def _fits(response: httpx.Response, size: int) -> bool:
    """The answer declares a length of at most `size` (and no encoding to undo)."""
    if isinstance(response.stream, PlainStream):
        length = response.stream.declared()
        return length is not None and length <= size
    declared = response.headers.get("content-length")
    if declared is None or not declared.isdigit() or "content-encoding" in response.headers:
        return False
    return int(declared) <= size


async def read_capped(response: httpx.Response, max_bytes: int, name: str) -> bytes:
    """The whole body, in chunks, refused as soon as it passes `max_bytes`
    (before a byte is read when the upstream declares a larger length)."""
    stream = response.stream
    if isinstance(stream, PlainStream) and (length := stream.declared()) is not None:
        if length > max_bytes:
            raise UpstreamResponseTooLarge(_too_large(name, max_bytes))
        return await stream.read_all()  # the parser stops at the declared length
    declared = response.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise UpstreamResponseTooLarge(_too_large(name, max_bytes))
    if declared is not None and declared.isdigit() and isinstance(stream, _AiohttpStream) \
            and "content-encoding" not in response.headers:
        # A declared length within the cap and nothing to decode (the usual
        # answer): aiohttp reads exactly that many bytes in one call, without
        # httpx's decoder and chunker and the stream's generators around
        # every chunk (~3 % of the web process's CPU per whole answer).
        with map_aiohttp_exceptions():
            return await stream.response.read()
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():  # decoded, as aread() was
        size += len(chunk)
        if size > max_bytes:
            raise UpstreamResponseTooLarge(_too_large(name, max_bytes))
        parts.append(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _too_large(name: str, max_bytes: int) -> str:
    return (
        f"The answer of backend '{name}' is larger than {max_bytes} bytes "
        "(server.max_response_bytes); ask for less, or stream it."
    )


def relay_headers(response: httpx.Response) -> list[tuple[str, str]]:
    """The upstream's answer headers a client is given (`RELAYED_HEADERS`)."""
    return [(k, v) for k, v in response.headers.items() if k in _RELAYED or k.startswith(_RELAYED_PREFIXES)]
