"""POST /v1/messages: the Anthropic surface on the /v1 pipeline (CORE-11).

Parse and convert (`anthropic`, pure) → `proxy.handle(request,
"chat/completions", raw=...)`, so the whole pipeline runs unchanged (key gate
with `Authorization: Bearer` or `x-api-key`, model routing, retries, fallback,
capacity, observations) → convert the answer back. Streams are translated
chunk by chunk, never buffered; closing ours closes the pipeline's relay and
with it the upstream (CORE-10). `anthropic-version` is accepted and ignored;
the pipeline forwards only its own allow-list of headers, never that one.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing

import orjson
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from router import proxy
from router.core.errors import PathSelectorRejected, RequestTooLarge, RouterError, UpstreamError
from router.frontends import anthropic
from router.request import path_selector

log = logging.getLogger(__name__)

# Set by us on the converted response, or meaningless after conversion.
_NOT_COPIED = frozenset({"content-type", "content-length"})


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> HttpResponse:
    response = HttpResponse(anthropic.error_body(status, message), status=status, content_type="application/json")
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _router_error(exc: RouterError) -> HttpResponse:
    return error_response(exc.status, exc.message, exc.headers)


async def create_message(request: HttpRequest) -> HttpResponse:
    try:
        try:
            raw = request.body
        except RequestDataTooBig:
            raise RequestTooLarge() from None
        body = anthropic.parse(raw)
        selector = path_selector(body)
        if selector:
            raise PathSelectorRejected(
                f"'{selector}' is not accepted: the router picks the execution path from the selected provider's kind.",
                param=selector,
            )
        conversion = anthropic.to_openai(body)
    except RouterError as exc:
        return _router_error(exc)
    if conversion.ignored:
        log.debug("anthropic /v1/messages: ignored %s", "; ".join(conversion.ignored))
    inner = await proxy.handle(
        request, "chat/completions", raw=orjson.dumps(conversion.request), frontend="anthropic"
    )
    message_id = "msg_" + secrets.token_hex(12)
    if isinstance(inner, StreamingHttpResponse):
        translator = anthropic.MessageStream(
            model=conversion.model, message_id=message_id, stop_sequences=conversion.stop_sequences
        )
        response: HttpResponse | StreamingHttpResponse = StreamingHttpResponse(
            _translated(inner, translator, conversion, message_id),
            status=inner.status_code,
            content_type="text/event-stream; charset=utf-8",
        )
    else:
        response = _single(inner, conversion, message_id)
    for name, value in inner.items():
        if name.lower() not in _NOT_COPIED:
            response[name] = value
    return response


def _single(inner: HttpResponse, conversion: anthropic.Conversion, message_id: str) -> HttpResponse:
    """A whole-body answer: a message, an error, or (for a stream request the
    backend answered in one piece) the message replayed as events."""
    status = inner.status_code
    if status >= 400:
        return HttpResponse(
            anthropic.error_from_openai(status, inner.content), status=status, content_type="application/json"
        )
    try:
        message = _message(inner.content, conversion, message_id)
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


def _source(inner: StreamingHttpResponse) -> AsyncGenerator[bytes, None]:
    # Django's `streaming_content` wraps the iterator in a generator that does
    # not close it when itself closed: iterate the pipeline's own relay so that
    # closing this stream (client gone) runs the relay's `finally` at once.
    iterator = getattr(inner, "_iterator", None)
    if inner.is_async and hasattr(iterator, "aclose"):
        return iterator  # type: ignore[return-value]
    return aiter(inner)  # type: ignore[return-value]


async def _translated(
    inner: StreamingHttpResponse,
    translator: anthropic.MessageStream,
    conversion: anthropic.Conversion,
    message_id: str,
) -> AsyncIterator[bytes]:
    """The inner stream, translated. `inner` stays referenced for as long as
    this generator lives: the pipeline frees the backend slot when the inner
    response is garbage-collected unread."""
    event_stream = inner.get("Content-Type", "").startswith("text/event-stream")
    async with aclosing(_source(inner)) as chunks:
        if not event_stream:  # one JSON document, not a token stream
            body = b"".join([inner.make_bytes(chunk) async for chunk in chunks])
            try:
                if inner.status_code >= 400:
                    raise UpstreamError(anthropic.error_message(body))
                frames = anthropic.message_events(_message(body, conversion, message_id))
            except RouterError as exc:
                kind = anthropic.error_type(inner.status_code if inner.status_code >= 400 else exc.status)
                frames = [anthropic.error_frame(kind, exc.message)]
            yield b"".join(frames)
            return
        try:
            async for chunk in chunks:
                # After a terminal frame we keep draining (feed returns nothing)
                # so the relay ends normally and records a completed stream.
                out = translator.feed(inner.make_bytes(chunk))
                if out:
                    yield b"".join(out)
        except Exception:  # the relay reports upstream failures itself; this is ours
            log.exception("anthropic /v1/messages: translating the stream failed")
            yield b"".join(translator.fail("The router failed while streaming the answer."))
            return
        tail = translator.finish()
        if tail:
            yield b"".join(tail)


async def method_not_allowed(request: HttpRequest, **kwargs) -> HttpResponse:
    return error_response(405, f"Method {request.method} is not allowed on {request.path}.")


def unknown(request: HttpRequest, rest: str) -> HttpResponse:
    """Anything under /v1/messages the router does not serve, Anthropic-shaped."""
    if rest.strip("/") == "messages":
        return error_response(405, f"Method {request.method} is not allowed on /v1/{rest}.")
    return error_response(404, f"Unknown path /v1/{rest}; this router serves POST /v1/messages only.")
