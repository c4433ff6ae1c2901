"""A fake OpenTelemetry collector: OTLP/HTTP protobuf traces on loopback.

    python -m fakes.otlp_collector --port 4318

Accepts `POST /v1/traces` (`application/x-protobuf`, optionally gzip), decodes
each body as the real `ExportTraceServiceRequest` (opentelemetry-proto) and
keeps every span as a plain dict: name, kind, trace/span/parent ids in hex,
attributes and resource attributes as Python values, events, status. The raw
bodies and request headers are kept too, so a test can grep the exact bytes
that left the router.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from .server import ServerThread

__all__ = ["Collector", "decode"]

KINDS = {v: k.removeprefix("SPAN_KIND_") for k, v in Span.SpanKind.items()}
STATUSES = {v: k.removeprefix("STATUS_CODE_") for k, v in Status.StatusCode.items()}


def value_of(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [value_of(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, which)


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in kvs}


def decode(body: bytes) -> list[dict[str, Any]]:
    """The spans of one ExportTraceServiceRequest body, as dicts."""
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    spans = []
    for rs in req.resource_spans:
        resource = _attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                spans.append(
                    {
                        "name": s.name,
                        "kind": KINDS.get(s.kind, str(s.kind)),
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex() or None,
                        "start_ns": s.start_time_unix_nano,
                        "end_ns": s.end_time_unix_nano,
                        "attributes": _attrs(s.attributes),
                        "events": [
                            {"name": e.name, "time_ns": e.time_unix_nano, "attributes": _attrs(e.attributes)}
                            for e in s.events
                        ],
                        "status": STATUSES.get(s.status.code, str(s.status.code)),
                        "status_message": s.status.message,
                        "resource": resource,
                        "scope": ss.scope.name,
                    }
                )
    return spans


class Collector:
    """An OTLP/HTTP trace receiver in a background thread; `url` is the base
    (what OTEL_EXPORTER_OTLP_ENDPOINT takes), `spans` what it received."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.spans: list[dict[str, Any]] = []
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._thread = ServerThread(lambda _behavior, _requests: self._app(), host=host, port=port)

    @property
    def url(self) -> str:
        return self._thread.url

    def start(self) -> Collector:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._thread.stop()

    def __enter__(self) -> Collector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.spans)

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._traces)
        return app

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        encoding = request.headers.get("Content-Encoding", "").lower()
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        if not request.content_type.startswith("application/x-protobuf"):
            return web.Response(status=415, text="expected application/x-protobuf")
        try:
            spans = decode(body)
        except Exception as exc:  # a body that is not an ExportTraceServiceRequest
            return web.Response(status=400, text=f"undecodable: {type(exc).__name__}")
        with self._lock:
            self.bodies.append(body)
            self.headers.append(dict(request.headers))
            self.spans.extend(spans)
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )


def main(argv: list[str] | None = None) -> None:
    import argparse
    import json
    import time

    p = argparse.ArgumentParser(prog="python -m fakes.otlp_collector", description="Print OTLP/HTTP trace spans.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=4318)
    a = p.parse_args(argv)
    with Collector(a.host, a.port) as collector:
        print(f"OTLP/HTTP traces at {collector.url}/v1/traces", flush=True)
        seen = 0
        try:
            while True:
                time.sleep(0.5)
                spans = collector.snapshot()
                for span in spans[seen:]:
                    print(json.dumps({k: span[k] for k in ("name", "trace_id", "attributes")}), flush=True)
                seen = len(spans)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
