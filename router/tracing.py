"""OpenTelemetry traces of `/v1` requests, exported by OTLP/HTTP (docs/tracing.md).

Off unless the standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
`OTEL_EXPORTER_OTLP_ENDPOINT` is set (and `OTEL_SDK_DISABLED` is not true).
Off, this module imports nothing of OpenTelemetry and the request path pays
one check of the module-level `ENABLED` per seam (`if tracing.ENABLED:`).

On, `start()` (from `Runtime.start`) builds one TracerProvider with a
BatchSpanProcessor and the OTLP/HTTP protobuf exporter; the SDK reads the
other standard variables itself (headers, timeout, compression, certificates,
OTEL_BSP_*, OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME). Ending a span only
appends it to the processor's bounded queue (full → dropped); the export runs
in the processor's own thread, so a slow or dead collector never blocks the
event loop and never fails a request.

One `RequestTrace` per request, created by the front door: a SERVER span
(parented on an incoming W3C `traceparent`), a "select" child per selection,
an "upstream" CLIENT child per attempt (whose context goes upstream as
`traceparent`), a "fallback" event per hop. Every span is started and ended
with explicit parents and times — no context variables, so a stream that
ends in another task ends its span all the same. The server span's
attributes are read from the request's observation when it ends: one source
for the log line, the metrics and the trace. Never the key itself, only
where it came from (`router.key_source`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, MutableMapping
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_SERVICE_NAME = "llm-router"
VALUE_MAX = 256  # characters of a client-chosen attribute value (model, request id)


def configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard OTEL_* variables ask for an OTLP trace export."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
    if "otlp" not in [name.strip() for name in exporters.split(",")]:
        return False
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    )


ENABLED: bool = configured()

# Set by start(): the SDK's objects, imported only then.
_provider: Any = None
_tracer: Any = None
_propagator: Any = None
_lock = threading.Lock()
_SERVER: Any = None
_CLIENT: Any = None
_ERROR: Any = None
_in_context: Any = None

# gen_ai.operation.name per endpoint (OpenTelemetry GenAI conventions).
_OPERATIONS = {
    "chat/completions": "chat",
    "completions": "text_completion",
    "embeddings": "embeddings",
    "responses": "chat",
    "messages/count_tokens": "count_tokens",
}


def start() -> None:
    """Build the provider and exporter once per process (idempotent)."""
    global _provider, _tracer, _propagator, _SERVER, _CLIENT, _ERROR, _in_context
    if _tracer is not None:
        return
    with _lock:
        if _tracer is not None:
            return
        from django.conf import settings
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import SpanKind, StatusCode, set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        protocol = os.environ.get(
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        )
        if protocol.strip() not in ("", "http/protobuf"):
            log.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s is not supported; traces go by http/protobuf", protocol)
        resource = Resource.create(
            {
                "router.node_id": str(settings.ROUTER_NODE_ID),
                "router.deployment_id": str(settings.ROUTER_DEPLOYMENT_ID),
                "service.instance.id": f"{settings.ROUTER_NODE_ID}:{os.getpid()}",
            }
        )
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
        provider = TracerProvider(resource=resource)  # flushed at exit (shutdown_on_exit)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        _SERVER, _CLIENT, _ERROR = SpanKind.SERVER, SpanKind.CLIENT, StatusCode.ERROR
        _in_context = set_span_in_context
        _propagator = TraceContextTextMapPropagator()
        _provider = provider
        _tracer = provider.get_tracer("router")
        log.info("tracing: OTLP/HTTP export on (service.name=%s)", resource.attributes.get(SERVICE_NAME))


def flush(timeout_ms: int = 5000) -> bool:
    """Export what is queued now (tests, shutdown); False if it did not finish."""
    return bool(_provider.force_flush(timeout_ms)) if _provider is not None else True


def begin(method: str, route: str, endpoint: str, headers: Mapping[str, str]) -> RequestTrace:
    """The trace of one request arriving at `route` (a fixed path, never the
    client's), parented on its `traceparent` header when it has a valid one."""
    if _tracer is None:
        start()
    return RequestTrace(method, route, endpoint, headers)


# Observation field → span attribute (strings, capped; the key itself is never one).
_OBS_ATTRIBUTES = (
    ("model", "gen_ai.request.model"),
    ("request_id", "router.request_id"),
    ("routed_model", "router.routed_model"),
    ("served", "gen_ai.response.model"),
    ("provider", "router.backend"),
    ("kind", "gen_ai.provider.name"),
    ("key_source", "router.key_source"),
    ("queue", "router.queue"),
    ("error", "error.type"),
)


def _capped(value: Any) -> str:
    text = str(value)
    return text if len(text) <= VALUE_MAX else text[:VALUE_MAX]


def _tokens(usage: Any) -> tuple[int | None, int | None]:
    if not isinstance(usage, dict):
        return None, None
    inp = usage.get("prompt_tokens", usage.get("input_tokens"))
    out = usage.get("completion_tokens", usage.get("output_tokens"))
    return (inp if isinstance(inp, int) else None), (out if isinstance(out, int) else None)


class RequestTrace:
    """The spans of one request; every method is called on the event loop."""

    __slots__ = ("_attempt", "_ctx", "_ended", "span")

    def __init__(self, method: str, route: str, endpoint: str, headers: Mapping[str, str]) -> None:
        parent = _propagator.extract(headers) if "traceparent" in headers else None
        attrs: dict[str, Any] = {"http.request.method": method, "http.route": route, "url.path": route}
        operation = _OPERATIONS.get(endpoint)
        if operation:
            attrs["gen_ai.operation.name"] = operation
        self.span = _tracer.start_span(f"{method} {route}", context=parent, kind=_SERVER, attributes=attrs)
        self._ctx = _in_context(self.span)
        self._attempt: Any = None
        self._ended = False

    def selected(
        self, target: str, depth: int, started_ns: int, chosen: str | None, candidates: int, queue: str | None
    ) -> None:
        """A "select" span from `started_ns` to now: one selection of `target`."""
        attrs: dict[str, Any] = {
            "router.route.model": _capped(target),
            "router.fallback.depth": depth,
            "router.candidates": candidates,
            "router.queue": queue or "direct",
        }
        if chosen is not None:
            attrs["router.backend"] = chosen
        _tracer.start_span("select", context=self._ctx, start_time=started_ns, attributes=attrs).end()

    def hop(self, target: str, depth: int) -> None:
        """The chain moved on to fallback `target`."""
        self.span.add_event("fallback", {"router.fallback.target": _capped(target), "router.fallback.depth": depth})

    def upstream(self, backend: str, kind: str, target: str, attempt: int, headers: MutableMapping[str, str]) -> None:
        """An attempt on `backend` starts; its context goes upstream as `traceparent`
        (for the providers that forward the client's trace headers)."""
        self._end_attempt()
        span = _tracer.start_span(
            "upstream",
            context=self._ctx,
            kind=_CLIENT,
            attributes={
                "router.backend": backend,
                "router.backend.kind": kind,
                "gen_ai.provider.name": kind,
                "router.route.model": _capped(target),
                "router.attempt": attempt,
                "router.retry": attempt - 1,
            },
        )
        self._attempt = span
        _propagator.inject(headers, context=_in_context(span))

    def failed(self, error: str, *, status: int | None = None, detail: str = "") -> None:
        """The current attempt ended without an answer the client gets."""
        span = self._attempt
        if span is None:
            return
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        span.set_attribute("error.type", error)
        span.set_status(_ERROR, _capped(detail or error))
        self._end_attempt()

    def answered(self, status: int, stream: bool) -> None:
        """The current attempt's answer goes to the client (a stream's first byte now)."""
        span = self._attempt
        if span is not None:
            span.set_attribute("http.response.status_code", status)
        if stream:
            self.span.add_event("first_token")

    def end(self, obs: Mapping[str, Any]) -> None:
        """End every open span, the server span's attributes read from `obs`."""
        if self._ended:
            return
        self._ended = True
        status = obs.get("status")
        attempt = self._attempt
        if attempt is not None:
            if obs.get("stream_error"):
                attempt.set_status(_ERROR, "stream failed")
            self._end_attempt()
        span = self.span
        attrs: dict[str, Any] = {}
        if isinstance(status, int):
            attrs["http.response.status_code"] = status
        for key, name in _OBS_ATTRIBUTES:
            value = obs.get(key)
            if value:
                attrs[name] = _capped(value)
        if obs.get("kind"):
            attrs["gen_ai.system"] = str(obs["kind"])
        if obs.get("attempts") is not None:
            attrs["router.attempts"] = int(obs["attempts"])
        hops = obs.get("hops")
        if hops:
            attrs["router.fallback.hops"] = [_capped(h) for h in hops]
        inp, out = _tokens(obs.get("usage"))
        if inp is not None:
            attrs["gen_ai.usage.input_tokens"] = inp
        if out is not None:
            attrs["gen_ai.usage.output_tokens"] = out
        for key in ("ttft_ms", "latency_ms", "queue_ms"):
            value = obs.get(key)
            if isinstance(value, int | float):
                attrs["router." + key] = round(float(value), 3)
        if obs.get("stream_error"):
            attrs["router.stream_error"] = True
        if obs.get("client_disconnected"):
            attrs["router.client_disconnected"] = True
        span.set_attributes(attrs)
        if obs.get("stream_error"):
            span.set_status(_ERROR, str(obs.get("error") or "stream failed"))
        elif isinstance(status, int) and status >= 500:
            span.set_status(_ERROR, str(obs.get("error") or f"HTTP {status}"))
        span.end()

    def cancelled(self) -> None:
        """The client went away before an answer: end what is open."""
        self.end({"status": 499, "error": "client_disconnected", "client_disconnected": True})

    def _end_attempt(self) -> None:
        span, self._attempt = self._attempt, None
        if span is not None:
            span.end()


def now_ns() -> int:
    return time.time_ns()
