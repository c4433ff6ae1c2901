"""router.tracing in process: when it is on, and that off it costs no import.

The web application (config.asgi) serves real /v1 requests in a child
Python process (through httpx's ASGI transport, so no server is in the way)
whose modules and threads are then listed: with no OTLP endpoint set,
nothing of OpenTelemetry is imported and no exporter thread runs; with one
set, both are there (the same check, shown able to fail).

redis-py imports parts of the OpenTelemetry SDK itself whenever the SDK is
installed (its metrics: `opentelemetry.sdk.metrics`, the API's
`opentelemetry.trace`), so "nothing" means nothing of the tracing SDK, the
exporter or the wire format — what router.tracing would bring.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from router.tracing import configured
from tests.support.routerproc import ROOT, RouterProc

# The child reports from inside its event loop and leaves at once (os._exit):
# what is measured is the serving process, not asyncio.run's teardown of the
# runtime's background tasks (a server's lifespan does that) nor the SDK's
# exit-time flush to the endpoint that answers nothing.
CHILD = r"""
import asyncio, json, os, sys, threading
import httpx
from config.asgi import application

async def main():
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://router") as http:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        plain = await http.post("/v1/chat/completions", json=body, timeout=30)
        streamed = await http.post("/v1/chat/completions", json={**body, "stream": True}, timeout=30)
    print(json.dumps({
        "statuses": [plain.status_code, streamed.status_code], "done": b"[DONE]" in streamed.content,
        "modules": sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"),
        "threads": sorted(t.name for t in threading.enumerate()),
        "tracer": sys.modules["router.tracing"]._tracer is not None,
    }), flush=True)
    os._exit(0)

asyncio.run(main())
"""


# What only tracing imports (the SDK's trace half, the OTLP exporter and its protobufs).
TRACING_MODULES = (
    "opentelemetry.sdk.trace",
    "opentelemetry.exporter",
    "opentelemetry.proto",
    "opentelemetry.trace.propagation.tracecontext",
)


def run_web_process(backend_url: str, env: dict[str, str]) -> dict:
    proc = RouterProc(f"backends:\n  - {{name: a, url: '{backend_url}', models: [m]}}\nhealth: {{enabled: false}}\n")
    child_env = {k: v for k, v in proc.env.items() if not k.startswith("OTEL_")}
    child_env.update(env, DJANGO_SETTINGS_MODULE="config.settings")
    out = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, env=child_env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_unset_endpoint_imports_nothing_of_opentelemetry(openai_backends):
    (a,) = openai_backends("a")
    seen = run_web_process(a.url, {})
    assert seen["statuses"] == [200, 200] and seen["done"]
    assert [m for m in seen["modules"] if m.startswith(TRACING_MODULES)] == []
    assert not [t for t in seen["threads"] if t.startswith("Otel")]
    assert seen["tracer"] is False


def test_set_endpoint_starts_the_sdk_and_its_export_thread(openai_backends):
    (a,) = openai_backends("a")
    seen = run_web_process(a.url, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9/v1/traces"})
    assert seen["statuses"] == [200, 200] and seen["done"]
    assert "opentelemetry.sdk.trace" in seen["modules"]
    assert "opentelemetry.exporter.otlp.proto.http.trace_exporter" in seen["modules"]
    assert "OtelBatchSpanRecordProcessor" in seen["threads"]
    assert seen["tracer"] is True


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "console, otlp"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": ""}, True),
    ],
)
def test_the_standard_variables_turn_it_on(env, on):
    assert configured(env) is on
