"""An input file's lines: read from storage in bounded pieces, and checked.

A line is one JSON object `{"custom_id", "method": "POST", "url", "body"}`
(OpenAI's batch input format). Reading never holds more than one line
(at most `limit` bytes, the router's body limit) and a block of `BLOCK`
lines at a time; a longer line is an error of its own, never read whole.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import orjson

from router.core.errors import RouterError

from ..services import file_storage

BLOCK = 256  # lines read per thread hop
MAX_ERRORS = 100  # validation errors a failed batch lists (the count says how many more)
MAX_CUSTOM_ID = 512


@dataclass(slots=True, frozen=True)
class LineError:
    line: int
    code: str
    message: str
    param: str | None = None

    def as_wire(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "param": self.param, "line": self.line}


class TooLong(Exception):
    """A line longer than the limit."""


def read_blocks(storage_name: str, limit: int) -> Generator[list[tuple[int, bytes | None]], None, None]:
    """(line number from 1, the line or None when over `limit`) in blocks of
    BLOCK, blank lines left out. Sync: iterate it in a thread."""
    with file_storage().open(storage_name, "rb") as handle:
        number = 0
        block: list[tuple[int, bytes | None]] = []
        while True:
            raw = handle.readline(limit + 1)
            if not raw:
                break
            number += 1
            if len(raw) > limit and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # skip the rest of the long line
                    raw = handle.readline(limit + 1)
                block.append((number, None))
            elif raw.strip():
                block.append((number, raw))
            if len(block) >= BLOCK:
                yield block
                block = []
        if block:
            yield block


def parse_line(raw: bytes | None, number: int, endpoint: str) -> tuple[str, dict[str, Any]]:
    """(custom_id, body) of a well-formed line; raises a LineError."""
    if raw is None:
        raise _error(number, "line_too_large", "The line is larger than the router's request body limit.")
    try:
        item = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _error(number, "invalid_json_line", "The line is not valid JSON.") from None
    if not isinstance(item, dict):
        raise _error(number, "invalid_json_line", "The line is not a JSON object.")
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID:
        raise _error(number, "invalid_custom_id", f"'custom_id' must be a string of 1 to {MAX_CUSTOM_ID} characters.",
                     "custom_id")
    if item.get("method") != "POST":
        raise _error(number, "invalid_method", "'method' must be 'POST'.", "method")
    if item.get("url") != endpoint:
        raise _error(number, "mismatched_endpoint", f"'url' must be the batch's endpoint, '{endpoint}'.", "url")
    body = item.get("body")
    if not isinstance(body, dict):
        raise _error(number, "invalid_body", "'body' must be a JSON object.", "body")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise _error(number, "missing_model", "'body.model' must name a model.", "body.model")
    if body.get("stream"):
        raise _error(number, "stream_unsupported", "A batch line cannot stream ('body.stream').", "body.stream")
    return custom_id, body


class LineFailed(Exception):
    def __init__(self, error: LineError) -> None:
        super().__init__(error.message)
        self.error = error


def _error(number: int, code: str, message: str, param: str | None = None) -> LineFailed:
    return LineFailed(LineError(number, code, message, param))




@dataclass(slots=True)
class Verdict:
    total: int = 0
    model: str = ""
    errors: list[LineError] | None = None
    more_errors: int = 0  # errors past MAX_ERRORS, counted only


def validate(
    storage_name: str, endpoint: str, limit: int, max_lines: int, check_model: Callable[[str], None]
) -> Verdict:
    """Every line checked (sync: run it in a thread). `check_model` raises
    the RouterError a request of the batch's key for that model would get."""
    verdict = Verdict(errors=[])
    assert verdict.errors is not None
    seen: set[str] = set()
    refused: dict[str, RouterError | None] = {}  # model → the key's refusal, checked once per model
    for block in read_blocks(storage_name, limit):
        for number, raw in block:
            verdict.total += 1
            try:
                if verdict.total > max_lines:
                    raise _error(number, "too_many_lines", f"A batch holds at most {max_lines} requests.")
                custom_id, body = parse_line(raw, number, endpoint)
                if custom_id in seen:
                    raise _error(number, "duplicate_custom_id", f"The custom_id '{custom_id}' is used before.",
                                 "custom_id")
                seen.add(custom_id)
                model = body["model"]
                if model not in refused:
                    try:
                        check_model(model)
                        refused[model] = None
                    except RouterError as exc:
                        refused[model] = exc
                refusal = refused[model]
                if refusal is not None:
                    raise _error(number, refusal.code or "model_not_allowed", refusal.message, "body.model")
                verdict.model = verdict.model or model
            except LineFailed as failed:
                if len(verdict.errors) < MAX_ERRORS:
                    verdict.errors.append(failed.error)
                else:
                    verdict.more_errors += 1
                if failed.error.code == "too_many_lines":
                    return verdict
    if verdict.total == 0:
        verdict.errors.append(LineError(0, "empty_file", "The input file holds no requests."))
    return verdict
