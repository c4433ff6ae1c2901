"""What every request to an Anthropic backend shares: its base URL, its
headers (`x-api-key` + `anthropic-version`, never a Bearer token). The answer
headers relayed are `http.relay_headers`'s, as for every provider (the error
that ends a failed stream is `relay.mid_stream_error`)."""

from __future__ import annotations

from ...core.backend import BackendSpec

API_VERSION = "2023-06-01"


def api_base(spec: BackendSpec) -> str:
    """The URL without a trailing `/v1` (paths below add it)."""
    url = spec.url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def auth_headers(spec: BackendSpec) -> dict[str, str]:
    """`x-api-key` and `anthropic-version` (unless configured), then the
    backend's configured headers. Never `Authorization: Bearer`."""
    headers = {"anthropic-version": API_VERSION}
    if spec.api_key:
        headers["x-api-key"] = spec.api_key.reveal()
    for name, value in spec.headers:
        headers[name.lower()] = value
    return headers


def request_headers(spec: BackendSpec, forwarded: dict[str, str] | None = None) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept-encoding": "identity"}
    for name, value in (forwarded or {}).items():
        if value.isascii():
            headers[name] = value
    headers.update(auth_headers(spec))
    return headers
