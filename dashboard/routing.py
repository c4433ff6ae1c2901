"""WebSocket entry of the dashboard: none; live updates are polled.

The channel layer is in-memory (per process), so a socket would only ever
see the state of the process that accepted it — exactly what polling that
process's `/dashboard/live.json` already gives, without a second transport.
`config.asgi` routes every websocket scope here; the handshake is refused
(HTTP 403 per the ASGI spec) so clients fail fast instead of hanging.
"""

from __future__ import annotations


async def websocket_app(scope, receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "websocket.connect":
            await send({"type": "websocket.close", "code": 1000})
            return
        if message["type"] == "websocket.disconnect":
            return
