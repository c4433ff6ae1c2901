"""Which fake backend wrote an answer the router relayed.

The router relays only the answer headers an API client needs
(router/providers/http.py `RELAYED_HEADERS`), so the fakes' `x-backend-name`
stops at the router; the reply text names its backend instead
("Hello from <name>. …", fakes/server.py `reply_pieces`).
"""

from __future__ import annotations

import re

import httpx
import orjson

_AUTHOR = re.compile(r"Hello from (\S+)\.(?:\s|$)")


def answered_by(response: httpx.Response) -> str | None:
    """The name of the fake that wrote a 200 chat completion, whole or streamed."""
    if response.status_code != 200:
        return None
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = "".join(_delta_text(line[5:]) for line in response.content.splitlines() if line.startswith(b"data:"))
    else:
        text = response.json()["choices"][0]["message"]["content"] or ""
    found = _AUTHOR.search(text)
    return found.group(1) if found else None


def _delta_text(data: bytes) -> str:
    data = data.strip()
    if data == b"[DONE]":
        return ""
    choices = orjson.loads(data).get("choices") or [{}]
    return (choices[0].get("delta") or {}).get("content") or ""
