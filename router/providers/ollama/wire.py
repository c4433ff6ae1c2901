"""Ollama wire details: NDJSON framing, error bodies, the model list.

`NdjsonDecoder` splits on the newline *byte*: a newline never occurs inside a
UTF-8 multi-byte sequence, so chunks may end anywhere, even mid-character.
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

MAX_LINE = 16 * 1024 * 1024


class NdjsonError(ValueError):
    """A line of the stream is not a JSON object (or is far too long)."""


class NdjsonDecoder:
    """Bytes in arbitrary chunks → one dict per complete line.

    A partial line is kept as a list of chunks and joined once its newline
    arrives, so a long line costs linear time however finely it is chunked.
    """

    __slots__ = ("_max_line", "_pending", "_size")

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._pending: list[bytes] = []
        self._size = 0
        self._max_line = max_line

    def feed(self, data: bytes) -> list[dict]:
        if b"\n" not in data:
            self._pending.append(data)
            self._size += len(data)
            if self._size > self._max_line:
                raise NdjsonError(f"NDJSON line longer than {self._max_line} bytes")
            return []
        if self._pending:
            data = b"".join((*self._pending, data))
        lines = data.split(b"\n")
        rest = lines.pop()
        self._pending = [rest] if rest else []
        self._size = len(rest)
        return [obj for line in lines if (obj := _decode(line)) is not None]

    def close(self) -> list[dict]:
        """The last line, for a stream that did not end with a newline."""
        rest = b"".join(self._pending)
        self._pending, self._size = [], 0
        obj = _decode(rest)
        return [] if obj is None else [obj]


def _decode(line: bytes) -> dict | None:
    line = line.strip()
    if not line:
        return None
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise NdjsonError(f"invalid NDJSON line: {line[:200]!r}") from exc
    if not isinstance(obj, dict):
        raise NdjsonError(f"NDJSON line is not an object: {line[:200]!r}")
    return obj


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
