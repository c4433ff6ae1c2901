"""Passthrough: OpenAI-compatible kinds get the client's bytes.

Only the `model` field is rewritten (to the backend's served name) and the
provider's auth/headers set; every other field, known or not, survives
byte for byte. Status, headers and SSE are relayed as they come, chunk by
chunk, and so is a long whole answer with no name to rewrite (never held).
A served-name rewrite is undone on the way back so the client sees the name
it asked for (the whole answer parsed once, dumped once; a stream whole line
by line through the shared line decoder, `framing.Lines`, capped at 16 MiB a
line). A 2xx answer must be what the request asked for — SSE for `stream:
true`, JSON otherwise — or it is a bad answer, retried elsewhere (`send`'s
`expect`). Probed at health.path (`/v1/models` by default), which is also
its model listing.

The rest of the OpenAI surface (images, audio, moderations, vLLM's rerank and
score: router/frontends/surface.py) goes to the same path on the server, a
multipart form from its spool (router/spool.py) with its own Content-Type and
only its `model` value replaced;
an answer that is not JSON (a transcription as text, speech audio) is taken
as it is, and audio is always relayed chunk by chunk, never held.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson

from ..core.backend import BackendSpec
from ..request import Envelope
from ..spool import Upload
from .base import AnswerCut, Exchange
from .estimate import estimated_count
from .framing import FramingError, Lines
from .http import JSON, SSE, bearer_probe_headers, provider_headers, relay_headers, send
from .relay import EARLY_FAILURES, failed_early, mid_stream_error
from .stream_usage import UsageTaken, asked_body, asks

# A whole answer the client may get as it comes (no name to rewrite, the door
# relays bytes) is read whole only up to this declared length; a longer one,
# or one of unknown length, is relayed chunk by chunk, never held.
RELAY_OVER = 256 * 1024

# Client request headers worth forwarding (the rest are ours or hop-by-hop).
_FORWARD = ("accept", "user-agent", "openai-beta", "x-request-id", "traceparent", "tracestate")


def api_base(spec: BackendSpec) -> str:
    return spec.url if spec.url.endswith("/v1") else spec.url + "/v1"


def server_root(spec: BackendSpec) -> str:
    """The server's root: the URL without the `/v1` it may end with."""
    base = spec.url.rstrip("/")
    return base[:-3] if base.endswith("/v1") else base


def upstream_headers(spec: BackendSpec, env: Envelope) -> dict[str, str]:
    forwarded = {name: env.headers[name] for name in _FORWARD if name in env.headers}
    headers = provider_headers(spec, forwarded)
    if "form" in env.notes:  # a multipart body goes with its own Content-Type (its boundary)
        headers["content-type"] = env.headers["content-type"]
    return headers


def _surface_body(env: Envelope, served: str) -> bytes | Upload:
    """A surface endpoint's body (router/frontends/surface.py): the client's
    bytes; a form's from its spool, with only its `model` value replaced when
    it differs."""
    form = env.notes.get("form")
    if form is None:
        return request_body(env, served)
    spool = env.notes["spool"]
    return Upload(spool) if served == env.model else Upload(spool, form.spans["model"], served.encode())


def request_body(env: Envelope, served: str, ask_usage: bool = False) -> bytes:
    if ask_usage:
        return asked_body(env.raw, env.body, served)
    if served == env.model and env.body.get("model") == served:
        return env.raw
    body = dict(env.body)
    body["model"] = served
    return orjson.dumps(body)


# The rest of the OpenAI surface (router/frontends/surface.py), passed through
# to the same path on the backend; what each answers (`Surface.answer`) says
# how it is relayed. The audio of /v1/audio/speech is always relayed as it comes.
SURFACE = frozenset(
    {
        "images/generations",
        "images/edits",
        "images/variations",
        "audio/transcriptions",
        "audio/translations",
        "audio/speech",
        "moderations",
        "rerank",
        "score",
    }
)

_CLOUD_KINDS = frozenset({"openai_api", "seulgivibe_claude", "seulgivibe_openai"})


class OpenAIProvider:
    """Every server that speaks the OpenAI HTTP API itself."""

    kinds = frozenset(
        {
            "openai_compat",
            "openai_api",
            "vllm",
            "vllm-mlx",
            "lemonade",
            "sglang",
            "seulgivibe_claude",
            "seulgivibe_openai",
        }
    )
    path = "passthrough"
    surface = SURFACE

    def probe_url(self, spec: BackendSpec, path: str) -> str | None:
        """`path` (health.path, `/v1/models` by default) under the backend's
        base, without doubling a `/v1` the URL already ends with."""
        base = spec.url.rstrip("/")
        if base.endswith("/v1") and path.startswith("/v1/"):
            return base + path[3:]
        return base + path

    def probe_headers(self, spec: BackendSpec) -> dict[str, str]:
        return bearer_probe_headers(spec)

    def load_url(self, spec: BackendSpec, path: str) -> str | None:
        """Where a self-hosted server publishes its load: `path`
        (health.load_path, `/metrics`) at the server's root, beside `/v1`, as
        vLLM, SGLang and llama.cpp's server serve it. Cloud APIs publish none."""
        if spec.kind in _CLOUD_KINDS:
            return None
        base = spec.url.rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3]
        return base + path

    def listed_models(self, data: dict[str, Any]) -> list[str] | None:
        """Model ids from a `GET /v1/models` answer (`{"data": [{"id": …}]}`)."""
        items = data.get("data")
        if not isinstance(items, list):
            return None
        return [m["id"] for m in items if isinstance(m, dict) and isinstance(m.get("id"), str)]

    async def start(self, rt, spec: BackendSpec, env: Envelope, model: str) -> Exchange:
        if env.endpoint == "messages/count_tokens":  # no count endpoint: the marked estimate
            return estimated_count(spec, env.body, model)
        served = spec.served_name(model)
        rewrite = served != env.model
        relay = not env.stream and env.relay_whole and not rewrite
        # Usage on every stream (router/providers/stream_usage.py): asked
        # for here, taken back out of the client's stream by the relay.
        ask_usage = env.stream_usage and asks(env.body, env.endpoint, env.stream)
        relay_over: int | None = RELAY_OVER if relay else None
        expect: str | None = SSE if env.stream else JSON
        surface = env.notes.get("surface")
        content: bytes | Upload
        if surface is None:
            url, content = f"{api_base(spec)}/{env.endpoint}", request_body(env, served, ask_usage)
        else:
            url, content = server_root(spec) + env.notes["path"], _surface_body(env, served)
            if surface.answer == "binary" and not env.stream:
                relay_over = 0  # audio: relayed as it comes, never held (no name in it to rewrite)
            if surface.answer != "json" and not env.stream:
                expect = None  # audio, or a transcription as text / SRT / VTT
        sent = await send(
            rt.transport,
            spec,
            url,
            content=content,
            headers=upstream_headers(spec, env),
            stream=env.stream,
            max_bytes=env.max_response_bytes,
            relay_over=relay_over,
            expect=expect,
        )
        response = sent.response
        first, lines = sent.first, None
        if (rewrite or ask_usage) and sent.rest is not None and env.stream:
            # Rewritten whole lines at a time, the first before the client
            # sees a byte: a stream that breaks (or passes the line cap)
            # before its first line is still retried elsewhere.
            lines = Lines()
            try:
                first = await _first_lines(lines, first, sent.rest)
            except EARLY_FAILURES as exc:
                await response.aclose()
                raise failed_early(spec.name, exc) from exc
        return Exchange(
            spec=spec,
            status=response.status_code,
            headers=relay_headers(response),
            content_type=response.headers.get("content-type", "application/json"),
            body=first,
            stream=sent.rest,
            close=response.aclose if sent.rest is not None else None,
            upstream_ms=sent.ms,
            info={
                "served": served,
                "rewrite": rewrite,
                "lines": lines,
                "taken": UsageTaken() if ask_usage and lines is not None else None,
            },
        )

    def finish(self, ex: Exchange, env: Envelope) -> tuple[bytes, dict]:
        """The whole body as the client gets it (the served name undone).

        Parsed only to rewrite the name (once, dumped once); otherwise relayed
        as it came, its usage read from the small object near its end."""
        body = ex.body
        info: dict = {}
        if ex.status >= 400 or body[:1] != b"{":
            return body, info
        if not ex.info.get("rewrite", False):
            info["usage"] = tail_usage(body)
            return body, info
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            return body, info
        if isinstance(obj, dict):
            info["usage"] = obj.get("usage")
            if "model" in obj:
                obj["model"] = env.model
                body = orjson.dumps(obj)
        return body, info

    def relay(self, ex: Exchange, env: Envelope, done: Callable[[bool | None, dict], None]) -> AsyncIterator[bytes]:
        return _relay(ex, env, done)


def _model_rewriter(served: str, requested: str) -> Callable[[bytes], bytes]:
    old = b'"model":' + orjson.dumps(served)
    new = b'"model":' + orjson.dumps(requested)
    old_spaced = b'"model": ' + orjson.dumps(served)
    new_spaced = b'"model": ' + orjson.dumps(requested)

    def rewrite(line: bytes) -> bytes:
        return line.replace(old, new).replace(old_spaced, new_spaced)

    return rewrite


async def _first_lines(lines: Lines, first: bytes, rest: AsyncIterator[bytes]) -> bytes:
    """The stream's first whole lines (all of it, when it ends before a newline)."""
    block = lines.feed(first)
    while not block:
        try:
            chunk = await anext(rest)
        except StopAsyncIteration:
            return lines.rest()
        block = lines.feed(chunk)
    return block


async def _relay(ex: Exchange, env: Envelope, done: Callable[[bool | None, dict], None]) -> AsyncIterator[bytes]:
    """Yield upstream chunks as they arrive (whole lines, with the served name
    undone, when `start` rewrote them). A client disconnect cancels this
    generator; `finally` closes the upstream at once (CORE-10). A failure
    ends an event stream with an error event, a JSON document with
    `AnswerCut` (its client must see it cut, not complete)."""
    ok: bool | None = None  # stays None when the client goes away: no verdict
    event_stream = env.stream  # else one JSON document relayed as it comes
    tail = b""
    lines: Lines | None = ex.info.get("lines")
    fix = _model_rewriter(ex.info["served"], env.model) if ex.info.get("rewrite") and lines is not None else None
    taken: UsageTaken | None = ex.info.get("taken")
    try:
        chunk = ex.body  # whole lines already, when rewritten or usage was asked for
        iterator = ex.stream
        while True:
            if fix is not None:
                chunk = fix(chunk)
            if taken is not None:
                chunk = taken(chunk)
            if chunk:
                tail = (tail + chunk)[-4096:]
                yield chunk
            try:
                data = await anext(iterator)  # type: ignore[arg-type]
            except StopAsyncIteration:
                break
            chunk = data if lines is None else lines.feed(data)
        if lines is not None and (last := lines.rest()):
            last = fix(last) if fix is not None else last
            last = taken(last) if taken is not None else last
            if last:
                tail = (tail + last)[-4096:]
                yield last
        ok = True
    except (httpx.HTTPError, FramingError) as exc:
        ok = False
        if not event_stream:
            raise AnswerCut(f"{ex.spec.name} broke off its answer: {exc}") from exc
        yield mid_stream_error(exc).to_sse()
    finally:
        if ex.close is not None:
            await ex.close()
        usage: dict | None
        if taken is not None and taken.usage is not None:
            usage = taken.usage  # the usage chunk the client does not get
        else:
            usage = _stream_usage(tail) if event_stream else tail_usage(tail)
        done(ok, {"usage": usage})


def tail_usage(body: bytes) -> dict | None:
    """The last `"usage": {…}` object of a JSON answer (OpenAI puts the
    top-level one last), without parsing the whole answer: the object is
    parsed alone, closing at the first `}` that makes it valid JSON."""
    idx = len(body)
    for _ in range(4):  # "usage" may also occur as a value after the key
        idx = body.rfind(b'"usage"', 0, idx)
        if idx < 0:
            return None
        start = body.find(b"{", idx + 7, idx + 64)
        if start < 0 or body[idx + 7 : start].strip(b" \t\r\n") != b":":
            continue  # a value, or "usage": null
        end = start
        for _ in range(16):  # usage nests a few *_details objects at most
            end = body.find(b"}", end + 1)
            if end < 0:
                return None
            if body.count(b"{", start, end) != body.count(b"}", start, end) + 1:
                continue  # a nested object's end: not worth a failed parse (an exception each)
            try:
                obj = orjson.loads(body[start : end + 1])
            except orjson.JSONDecodeError:
                continue
            return obj if isinstance(obj, dict) else None
        return None
    return None


def _stream_usage(tail: bytes) -> dict | None:
    """Usage from the last `data:` event that carries it (include_usage)."""
    idx = tail.rfind(b'"usage"')
    if idx < 0:
        return None
    start = tail.rfind(b"data: ", 0, idx)
    if start < 0:
        return None
    end = tail.find(b"\n", idx)
    try:
        obj = orjson.loads(tail[start + 6 : end if end > 0 else None])
    except orjson.JSONDecodeError:
        return None
    if isinstance(obj, dict):
        usage = obj.get("usage") or (obj.get("response") or {}).get("usage")
        return usage if isinstance(usage, dict) else None
    return None


OPENAI = OpenAIProvider()
