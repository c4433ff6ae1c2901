"""Library internals the data plane reads, pinned so an upgrade fails here first.

`router.runtime.transport_of` reads `httpx.AsyncClient._transport`: the hot
path sends through the client's transport directly (docs/architecture.md,
"Upstream client"). If httpx renames that attribute or stops sending through
the transport given as `AsyncClient(transport=...)`, these tests fail with a
message saying what to re-read.
"""

from __future__ import annotations

import logging

import httpx
from django.http import HttpResponse
from django.test import RequestFactory
from django.utils.log import log_response
from httpx_aiohttp import AiohttpTransport

from router.frontends.responses import observed
from router.runtime import make_client, transport_of

WHY = (
    f"httpx {httpx.__version__}: router.runtime.transport_of reads AsyncClient._transport "
    "(the transport passed as AsyncClient(transport=...)); re-read httpx/_client.py and "
    "give transport_of a new way to reach that transport."
)


async def test_the_transport_given_to_the_client_is_its_private_transport():
    transport = httpx.MockTransport(lambda request: httpx.Response(204))
    async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
        assert getattr(client, "_transport", None) is transport, WHY
        assert transport_of(client) is transport, WHY


async def test_that_transport_is_the_one_that_handles_the_clients_requests():
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, text="from the transport")

    transport = httpx.MockTransport(handler)
    async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
        via_client = await client.get("http://upstream.test/a")
        via_transport = await transport_of(client).handle_async_request(
            httpx.Request("GET", "http://upstream.test/b")
        )
        await via_transport.aread()
    assert via_client.text == via_transport.text == "from the transport", WHY
    assert seen == ["http://upstream.test/a", "http://upstream.test/b"], WHY


async def test_the_runtime_client_sends_through_the_aiohttp_transport():
    client = make_client()
    try:
        assert isinstance(transport_of(client), AiohttpTransport), WHY
    finally:
        await client.aclose()


def test_django_skips_logging_a_response_the_door_already_observed(caplog):
    """The doors mark their responses with `observed()` so Django's request
    logger does not log a 5xx the observation already logged. That relies on
    django.utils.log.log_response honouring `response._has_been_logged`: if
    Django drops it, this fails (and 5xx lines would double again)."""
    request = RequestFactory().get("/v1/models")
    with caplog.at_level(logging.ERROR, logger="django.request"):
        log_response("x", response=HttpResponse(status=502), request=request)
        assert len(caplog.records) == 1  # the unmarked one is logged: the test can see logging
        log_response("x", response=observed(HttpResponse(status=502)), request=request)
    assert len(caplog.records) == 1
