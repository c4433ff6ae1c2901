"""Django responses shared by the front doors."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from time import perf_counter
from typing import TypeVar

from django.http import HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase

from ..core.errors import RouterError, ShuttingDown, UpstreamError
from ..observe import Gaps
from ..pipeline import Routed
from . import anthropic

log = logging.getLogger(__name__)


def error_response(exc: RouterError) -> HttpResponse:
    """An OpenAI-shaped error, with the error's own headers (e.g. Retry-After)."""
    response = HttpResponse(exc.to_body(), status=exc.status, content_type="application/json")
    for name, value in exc.headers.items():
        response[name] = value
    return response


def stopped_response(path: str) -> HttpResponse:
    """The 503 of a request the server's stop cut before its answer began,
    in the shape of the door `path` belongs to (as router/api.py tells them
    apart: `/v1/messages` is Anthropic's)."""
    exc = ShuttingDown()
    if path.startswith("/v1/messages"):
        body = anthropic.error_body(exc.status, exc.message)
        return HttpResponse(body, status=exc.status, content_type="application/json")
    return error_response(exc)


R = TypeVar("R", bound=HttpResponseBase)


def observed(response: R) -> R:
    """Mark a response the request's observation already records (the one
    `request` log line per request), so Django's request logger does not log
    its 5xx a second time, nor hop to a thread to decide for a 4xx."""
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response


class RoutedStream(StreamingHttpResponse):
    """A stream over a `Routed` result. Django calls `close()` once the
    response is done with — sent, failed, or the client gone before the first
    byte — and so the backend slot and the upstream are freed in every case,
    also for a stream that was never iterated.

    Iterated by the ASGI handler, it times the gaps between the chunks it
    hands on to the client (the inter-token latency, docs/metrics.md): one
    clock read and a few adds per chunk into the observation's `Gaps`,
    which the drainer turns into the histogram.

    A stream the server cuts when its graceful stop runs out (`stop()`, then
    the cancellation) ends with `cut`, the door's own error event (OpenAI's
    `data: {"error": …}` unless the door gives another), instead of just
    stopping; a stream that is not an event stream has nothing to end with."""

    def __init__(
        self, content: AsyncIterator[bytes], routed: Routed, *, status: int, content_type: str,
        cut: bytes | None = None,
    ) -> None:
        super().__init__(content, status=status, content_type=content_type)
        self.routed = routed
        self.gaps = routed.obs["gaps"] = Gaps()
        self.stopping = False
        self.cut: bytes | None = None
        if content_type.startswith("text/event-stream"):
            self["Cache-Control"] = "no-cache"
            self["X-Accel-Buffering"] = "no"
            self.cut = ShuttingDown().to_sse() if cut is None else cut

    async def __aiter__(self) -> AsyncIterator[bytes]:  # type: ignore[override]
        # Django's own __aiter__ wraps the content in two generators (one to
        # make bytes, which the relays already yield); this one replaces both.
        tick = self.gaps.tick
        try:
            async for part in self._iterator:
                tick(perf_counter())
                yield part
        except asyncio.CancelledError:
            if not self.stopping or self.cut is None:
                raise  # the client went away: nobody to tell
            yield self.cut  # the relay below has closed the upstream and freed the slot

    def stop(self) -> None:
        """The server is about to cancel this stream because it stops: the
        cancellation is then not a client's, and the stream ends with `cut`."""
        self.stopping = True

    def close(self) -> None:
        super().close()
        self.routed.abandon()


async def rendered(
    routed: Routed, render: Callable[[Routed], HttpResponseBase], refuse: Callable[[RouterError], HttpResponseBase]
) -> HttpResponseBase:
    """`render(routed)`; whatever it raises frees the slot and the upstream
    first, and becomes `refuse(error)` (a 502 for anything not ours)."""
    try:
        return observed(render(routed))
    except Exception as exc:  # nothing the render does may keep the slot
        await routed.aclose()
        return observed(refuse(as_refusal(exc)))


def as_refusal(exc: Exception) -> RouterError:
    """What the client is told when rendering an answer failed: our own error
    as it is, anything else (logged) a 502."""
    if isinstance(exc, RouterError):
        return exc
    log.error("rendering the answer failed: %s", type(exc).__name__, exc_info=exc)
    return UpstreamError("The router failed to relay the upstream answer.")

