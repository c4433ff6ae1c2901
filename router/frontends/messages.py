"""POST /v1/messages (and /v1/messages/count_tokens): the Anthropic door on the one pipeline (CORE-11).

Parse and convert (`anthropic`, pure) → admit → route, exactly as the OpenAI
door does (key gate with `Authorization: Bearer` or `x-api-key`, model
routing, retries, fallback, capacity, observations) → render the `Routed`
answer as Anthropic's message or events. Streams are translated chunk by
chunk, never buffered; a client disconnect closes the routed relay and with
it the upstream (CORE-10). `anthropic-version` is accepted and ignored; the
pipeline forwards only its own allow-list of headers, never that one.

An Anthropic-kind backend gets the client's own body (`env.notes`), and its
answer (`Exchange.wire == "anthropic"`) is relayed as it came: no double
translation. A count is answered by the provider when it can count, else by
the router's estimate, marked `X-Token-Count: estimate`
(router/providers/estimate.py).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import orjson
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from .. import tracing
from ..admission import admit, headers_of, ready_snapshot, reject_path_selector
from ..core.errors import RequestTooLarge, RouterError, ShuttingDown, UpstreamError, UpstreamResponseTooLarge
from ..pipeline import Routed, refused, route
from ..providers.base import WIRE_ANTHROPIC
from ..providers.http import DEFAULT_MAX_RESPONSE_BYTES
from ..request import Envelope, check_content_type, parse_body
from ..respcache import door as respcache
from . import anthropic
from .responses import RoutedStream, observed, rendered

log = logging.getLogger(__name__)

# Set by us on the converted response, or meaningless after conversion.
_NOT_COPIED = frozenset({"content-type", "content-length"})
# The event that ends a stream the server's stop cuts (RoutedStream.stop).
_CUT = anthropic.error_frame(anthropic.error_type(ShuttingDown.status), ShuttingDown.message)


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> HttpResponse:
    response = HttpResponse(anthropic.error_body(status, message), status=status, content_type="application/json")
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _router_error(exc: RouterError) -> HttpResponse:
    return error_response(exc.status, exc.message, exc.headers)


async def create_message(request: HttpRequest) -> HttpResponseBase:
    """POST /v1/messages."""
    return await _handle(request, count=False)


async def count_tokens(request: HttpRequest) -> HttpResponseBase:
    """POST /v1/messages/count_tokens: counted by the selected provider when it
    can (Anthropic, Gemini), else the router's estimate (`X-Token-Count: estimate`)."""
    return await _handle(request, count=True)


async def _handle(request: HttpRequest, *, count: bool) -> HttpResponseBase:
    started = time.perf_counter()
    endpoint = "messages/count_tokens" if count else "chat/completions"
    obs: dict[str, Any] = {"endpoint": endpoint, "frontend": "anthropic"}
    try:
        check_content_type(request.META.get("CONTENT_TYPE"))
        try:
            raw = request.body
        except RequestDataTooBig:
            raise RequestTooLarge() from None
        body = anthropic.parse(raw)
        reject_path_selector(body)
        conversion = anthropic.to_openai(_countable(body) if count else body)
    except RouterError as exc:
        return _router_error(exc)
    if conversion.ignored:
        log.debug("anthropic /v1/messages: ignored %s", "; ".join(conversion.ignored))
    trace = None
    try:
        snap = await ready_snapshot()
        headers = headers_of(request)
        if tracing.ENABLED:
            trace = tracing.begin("POST", "/v1/messages/count_tokens" if count else "/v1/messages", endpoint, headers)
        converted = orjson.dumps(conversion.request)
        request_body, model, stream = parse_body(converted, "chat/completions", snap.max_body_bytes)
        obs["model"] = model
        caller = await admit(request, snap, headers=headers, obs=obs)
        target = caller.pinned or model
        caller.check_model(target)
        env = Envelope(
            endpoint=endpoint, raw=converted, body=request_body, model=model, stream=stream,
            headers=headers, client_ip=caller.client_ip, host=caller.host, request_id=caller.request_id,
            max_response_bytes=snap.max_response_bytes,
            # An Anthropic-kind provider sends this as is (Exchange.wire "anthropic").
            notes={"anthropic_request": body},
        )
        if trace is not None:
            env.notes["trace"] = trace
        if snap.response_cache is not None and not count:
            routed = await respcache.answer(snap.response_cache, caller, env, target, obs, started,
                                            endpoint="messages", body=body)
        else:
            routed = await route(caller, env, target, obs, started)
    except RouterError as exc:
        refused(exc, obs, started, trace)
        return observed(_router_error(exc))
    return await rendered(routed, lambda r: _render(r, conversion), _router_error)


def _countable(body: dict[str, Any]) -> dict[str, Any]:
    """A count_tokens body as a Messages body: the count takes no `max_tokens`
    (nor `stream`), which the conversion requires."""
    if not isinstance(body.get("max_tokens"), int) or isinstance(body.get("max_tokens"), bool):
        body = {**body, "max_tokens": 1}
    return {k: v for k, v in body.items() if k != "stream"}


def _render(routed: Routed, conversion: anthropic.Conversion) -> HttpResponseBase:
    message_id = "msg_" + secrets.token_hex(12)
    response: HttpResponseBase
    if routed.exchange.wire == WIRE_ANTHROPIC:  # the provider's own Anthropic answer: as it came
        if routed.streaming:
            response = RoutedStream(routed.events(), routed, status=routed.status, content_type=routed.content_type,
                                    cut=_CUT)
        else:
            response = HttpResponse(routed.body(), status=routed.status, content_type=routed.content_type)
    elif routed.env.endpoint == "messages/count_tokens":  # an OpenAI-shaped refusal of the count
        response = HttpResponse(anthropic.error_from_openai(routed.status, routed.body()), status=routed.status,
                                content_type="application/json")
    elif routed.streaming:
        translator = anthropic.MessageStream(
            model=conversion.model, message_id=message_id, stop_sequences=conversion.stop_sequences
        )
        chunks = _translated(
            routed.events(), translator, conversion, message_id,
            status=routed.status, event_stream=routed.content_type.startswith("text/event-stream"),
            max_bytes=routed.env.max_response_bytes,
        )
        response = RoutedStream(chunks, routed, status=routed.status, content_type="text/event-stream; charset=utf-8",
                                cut=_CUT)
    else:
        response = _single(routed, conversion, message_id)
    for name, value in routed.headers:
        if name.lower() not in _NOT_COPIED:
            response[name] = value
    return response


def _single(routed: Routed, conversion: anthropic.Conversion, message_id: str) -> HttpResponse:
    """A whole-body answer: a message, an error, or (for a stream request the
    backend answered in one piece) the message replayed as events."""
    status = routed.status
    content = routed.body()
    if status >= 400:
        return HttpResponse(anthropic.error_from_openai(status, content), status=status, content_type="application/json")
    try:
        message = _message(content, conversion, message_id)
    except RouterError as exc:
        return _router_error(exc)
    if conversion.stream:
        events = b"".join(anthropic.message_events(message))
        return HttpResponse(events, status=status, content_type="text/event-stream; charset=utf-8")
    return HttpResponse(orjson.dumps(message), status=status, content_type="application/json")


def _message(content: bytes, conversion: anthropic.Conversion, message_id: str) -> dict:
    try:
        completion = orjson.loads(content)
    except orjson.JSONDecodeError:
        completion = None
    return anthropic.message_from_completion(
        completion, model=conversion.model, message_id=message_id, stop_sequences=conversion.stop_sequences
    )


async def _translated(
    source: AsyncIterator[bytes],
    translator: anthropic.MessageStream,
    conversion: anthropic.Conversion,
    message_id: str,
    *,
    status: int = 200,
    event_stream: bool = True,
    max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> AsyncIterator[bytes]:
    """The routed stream (OpenAI wire bytes), translated to Anthropic events.
    Closing this generator closes `source` at once (its `finally` closes the
    upstream)."""
    async with aclosing(source) as chunks:  # type: ignore[type-var]
        if not event_stream:  # one JSON document, not a token stream
            parts: list[bytes] = []
            size = 0
            try:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > max_bytes:
                        raise UpstreamResponseTooLarge(f"The upstream answer is larger than {max_bytes} bytes "
                                                       "(server.max_response_bytes).")
                    parts.append(chunk)
                body = b"".join(parts)
                del parts
                if status >= 400:
                    raise UpstreamError(anthropic.error_message(body))
                frames = anthropic.message_events(_message(body, conversion, message_id))
            except RouterError as exc:
                kind = anthropic.error_type(status if status >= 400 else exc.status)
                frames = [anthropic.error_frame(kind, exc.message)]
            yield b"".join(frames)
            return
        try:
            async for chunk in chunks:
                # After a terminal frame we keep draining (feed returns nothing)
                # so the relay ends normally and records a completed stream.
                out = translator.feed(chunk)
                if out:
                    yield b"".join(out)
        except Exception:  # the relay reports upstream failures itself; this is ours
            log.exception("anthropic /v1/messages: translating the stream failed")
            yield b"".join(translator.fail("The router failed while streaming the answer."))
            return
        tail = translator.finish()
        if tail:
            yield b"".join(tail)


def method_not_allowed(request: HttpRequest) -> HttpResponse:
    return error_response(405, f"Method {request.method} is not allowed on {request.path}; use POST.")


def unknown(request: HttpRequest, rest: str) -> HttpResponse:
    """Anything under /v1/messages the router does not serve, Anthropic-shaped."""
    return error_response(404, f"Unknown path /v1/{rest}; this router serves POST /v1/messages and POST /v1/messages/count_tokens.")
