"""Ollama wire details: NDJSON framing, error bodies, the model list.

`NdjsonDecoder` is the shared line decoder's NDJSON reader
(`framing.JsonLines`: chunks may end anywhere, a line is capped at 16 MiB).
"""

from __future__ import annotations

from datetime import datetime

import orjson

from router.core.errors import (
    CapacityExhausted,
    InvalidRequest,
    RequestTooLarge,
    RouterError,
    UpstreamError,
    UpstreamTimeout,
)
from router.providers.framing import JsonLines
from router.providers.framing import NdjsonError as NdjsonError

NdjsonDecoder = JsonLines  # the shared line decoder's NDJSON reader (router/providers/framing.py)


def _message(body: bytes) -> str:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace").strip()[:1000]
    error = obj.get("error") if isinstance(obj, dict) else obj
    if isinstance(error, dict):
        error = error.get("message")
    return "" if error is None else str(error)[:1000]


def ollama_error(status: int, body: bytes) -> RouterError:
    """An Ollama error answer → the catalogue error the client sees.

    400 is the client's request (e.g. a model without tool support); 404,
    401/403 and 5xx are the provider's problem (missing model, credentials,
    crash) and become 502; a full Ollama queue (429/503) is capacity.
    """
    text = f"Ollama: {_message(body) or f'HTTP {status}'}"
    if status == 400 or status == 422:
        return InvalidRequest(text)
    if status == 413:
        return RequestTooLarge(text)
    if status in (429, 503):
        return CapacityExhausted(text)
    if status in (408, 504):
        return UpstreamTimeout(text)
    return UpstreamError(text)


def error_from_ollama(status: int, body: bytes) -> tuple[int, dict]:
    error = ollama_error(status, body)
    return error.status, error.to_dict()


def _timestamp(value: object) -> int:
    if not isinstance(value, str):
        return 0
    try:
        return int(datetime.fromisoformat(value).timestamp())
    except ValueError:
        return 0


def models_from_tags(tags: dict, *, owned_by: str) -> list[dict]:
    """`GET /api/tags` → OpenAI model objects (`created` from modified_at)."""
    out = []
    for entry in tags.get("models") or ():
        if not isinstance(entry, dict):
            continue
        name = entry.get("name") or entry.get("model")
        if isinstance(name, str) and name:
            created = _timestamp(entry.get("modified_at"))
            out.append(
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": owned_by,
                }
            )
    return out
