"""CORS at the ASGI entry, for `/v1` only (router/core/cors.py decides).

A preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) is
answered here, before the key gate, since a browser never sends a key with
one: 204 with the policy's headers, or 403 `cors_not_allowed` naming what is
not allowed. Every other `/v1` request goes on with a `send` that adds the
policy's headers to its answer's head, whatever answers it (the door, a
refusal, a 503). With CORS off (`cors.allow_origins` empty) nothing here
runs; the dashboard, the admin and the probes never come through here.
"""

from __future__ import annotations

from typing import Any

from router.core.cors import CorsPolicy, Header
from router.core.errors import CorsNotAllowed

_ASKED = (b"origin", b"access-control-request-method", b"access-control-request-headers")


def asked(scope: dict[str, Any]) -> tuple[bytes | None, bytes | None, bytes | None]:
    """The request's Origin, Access-Control-Request-Method and -Headers."""
    origin = method = headers = None
    for name, value in scope["headers"]:
        if name in _ASKED:
            if name == b"origin":
                origin = value
            elif name == b"access-control-request-method":
                method = value
            else:
                headers = value if headers is None else headers + b"," + value
    return origin, method, headers


async def preflight(policy: CorsPolicy, send, origin: bytes, method: bytes, headers: bytes | None) -> None:
    refusal = policy.refusal(origin, method, headers)
    if refusal is None:
        await send(
            {"type": "http.response.start", "status": 204, "headers": list(policy.on_preflight(origin, headers))}
        )
        await send({"type": "http.response.body", "body": b""})
        return
    body = CorsNotAllowed(refusal).to_body()
    await send(
        {
            "type": "http.response.start",
            "status": CorsNotAllowed.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *policy.on_answer(None),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def answering(send, added: tuple[Header, ...]):
    """`send` with `added` appended to the answer's head."""

    async def send_with(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *added]}
        await send(message)

    return send_with
