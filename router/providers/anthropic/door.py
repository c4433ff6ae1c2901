"""The Anthropic door's own requests, sent as the client wrote them.

When `env.notes["anthropic_request"]` is the client's Anthropic body (the
/v1/messages door), it goes upstream as is — only `model` replaced by the
served name, `anthropic-beta` forwarded — and the answer, stream or error
comes back untranslated (`Exchange.wire = "anthropic"`), its usage noted on
the way; only the message's `model` is the name the client asked for again,
as on every other path. `messages/count_tokens` is answered the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson

from ...core.backend import BackendSpec
from ...core.errors import RouterError, UpstreamError
from ...request import Envelope
from .. import anthropic  # this package's pure conversions (its __init__)
from ..base import WIRE_ANTHROPIC, Exchange
from ..http import JSON, SSE, relay_headers, send
from ..relay import EARLY_FAILURES, failed_early, mid_stream_error
from .upstream import api_base, request_headers

_CLIENT_HEADERS = ("anthropic-beta",)  # forwarded on the door's own requests only


async def count(rt, spec: BackendSpec, env: Envelope, served: str, own: dict | None) -> Exchange:
    """`POST /v1/messages/count_tokens`: its answer (`{"input_tokens": N}`) or
    error as Anthropic gave it, for the Anthropic door."""
    conversion = anthropic.count_request(own, env.body, served)
    sent = await send(
        rt.transport,
        spec,
        api_base(spec) + "/v1/messages/count_tokens",
        content=orjson.dumps(conversion.request),
        headers=request_headers(spec, _forwarded(env, own)),
        stream=False,
        max_bytes=env.max_response_bytes,
        expect=JSON,
    )
    response = sent.response
    return Exchange(
        spec,
        response.status_code,
        relay_headers(response),
        response.headers.get("content-type", "application/json"),
        sent.first,
        upstream_ms=sent.ms,
        info={"served": served, "adapter": "anthropic", "notes": conversion.notes},
        wire=WIRE_ANTHROPIC,
    )


def _forwarded(env: Envelope, own: dict | None) -> dict[str, str]:
    if own is None:
        return {}
    return {name: env.headers[name] for name in _CLIENT_HEADERS if name in env.headers}


async def as_is(rt, spec: BackendSpec, env: Envelope, served: str, own: dict) -> Exchange:
    """The Anthropic door's own body, only `model` replaced; the answer untranslated."""
    body = dict(own)
    body["model"] = served
    sent = await send(
        rt.transport,
        spec,
        api_base(spec) + "/v1/messages",
        content=orjson.dumps(body),
        headers=request_headers(spec, _forwarded(env, own)),
        stream=env.stream,
        max_bytes=env.max_response_bytes,
        expect=SSE if env.stream else JSON,  # relayed as it is: only what the request asked for
    )
    response, ms = sent.response, sent.ms
    info: dict[str, Any] = {"served": served, "adapter": "anthropic"}
    content_type = response.headers.get("content-type", "application/json")
    if sent.rest is None:  # a whole answer (non-stream, or an error)
        whole = sent.first
        if response.status_code < 400:
            try:
                message = orjson.loads(whole)
            except orjson.JSONDecodeError:
                message = None
            if isinstance(message, dict):
                info["usage"] = anthropic.usage_of(message.get("usage"))
                if message.get("model") == served != env.model:  # the client sees the name it asked for
                    message["model"] = env.model
                    whole = orjson.dumps(message)
        return Exchange(
            spec,
            response.status_code,
            relay_headers(response),
            content_type,
            whole,
            upstream_ms=ms,
            info=info,
            wire=WIRE_ANTHROPIC,
        )
    watch = anthropic.UsageWatch()
    decoder = anthropic.SseDecoder()
    iterator = sent.rest
    head: list[bytes] = []
    chunk = sent.first
    try:
        while True:
            head.append(chunk)
            for event in decoder.feed(chunk):
                watch.feed(event)
            if watch.error is not None:
                raise watch.error
            if watch.started:
                break
            try:
                chunk = await anext(iterator)
            except StopAsyncIteration as exc:
                raise UpstreamError("the stream ended before its first event") from exc
    except EARLY_FAILURES as exc:
        await response.aclose()
        raise failed_early(spec.name, exc) from exc
    info["watch"] = watch
    return Exchange(
        spec,
        200,
        relay_headers(response),
        content_type,
        _requested_name(b"".join(head), served, env.model),
        stream=_watched(iterator, decoder, watch),
        close=response.aclose,
        upstream_ms=ms,
        info=info,
        wire=WIRE_ANTHROPIC,
    )


def _requested_name(head: bytes, served: str, requested: str) -> bytes:
    """`message_start` (always in the head) names the model the client asked
    for, not the served name: the first `"model":` of the stream is its."""
    if served == requested:
        return head
    for sep in (b":", b": "):
        old = b'"model"' + sep + orjson.dumps(served)
        if old in head:
            return head.replace(old, b'"model"' + sep + orjson.dumps(requested), 1)
    return head


async def _watched(iterator, decoder, watch) -> AsyncIterator[bytes]:
    """The rest of the event stream as it came; usage noted on the way."""
    async for chunk in iterator:
        for event in decoder.feed(chunk):
            watch.feed(event)
        yield chunk
    for event in decoder.close():
        watch.feed(event)
    if not watch.ended:
        raise UpstreamError("Anthropic ended the stream before message_stop.")


async def relay_as_is(ex: Exchange, done: Callable[[bool | None, dict], None]) -> AsyncIterator[bytes]:
    """The Anthropic stream as it came; a failure ends it with one Anthropic
    `error` event (the upstream's own error events pass through as they are)."""
    watch = ex.info["watch"]
    ok: bool | None = None
    try:
        if ex.body:
            yield ex.body
        async for data in ex.stream:  # type: ignore[union-attr]
            if data:
                yield data
        ok = watch.error is None
    except (RouterError, ValueError, httpx.HTTPError) as exc:
        ok = False
        if watch.error is None:
            error = mid_stream_error(exc)
            yield anthropic.error_event(error.status, error.message)
    finally:
        if ex.close is not None:
            await ex.close()
        done(ok, {"usage": watch.usage})
