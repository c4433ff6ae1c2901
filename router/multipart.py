"""The small fields of a `multipart/form-data` body, read in place.

The OpenAI endpoints that take a file (`/v1/audio/transcriptions`,
`/v1/images/edits`, …) name their model in a form field beside the file.
The router needs that field, and a few other small ones (`stream`), to
route and to check the key; it never needs the file. So the body (already
bounded by the body limit) is scanned for its part boundaries with
`bytes.find` — linear, no copy of any part — and only text parts (no
`filename`) up to `FIELD_MAX` bytes are decoded. The file bytes are never
copied; what goes upstream is the client's body as it came, or that body
with the one `model` value replaced (`Form.with_value`).

Bounded: at most `PARTS_MAX` parts are looked at; a part header block is
at most `HEAD_MAX` bytes. Anything malformed is a 400 naming what is wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .core.errors import InvalidRequest

FIELD_MAX = 64 * 1024  # a text field larger than this is not kept (a prompt may be long)
PARTS_MAX = 1000
HEAD_MAX = 16 * 1024

_BOUNDARY = re.compile(r'boundary=(?:"([^"]{1,200})"|([^;\s]{1,200}))', re.IGNORECASE)
_NAME = re.compile(rb'[;\s]name=(?:"([^"]*)"|([^;\s"]+))', re.IGNORECASE)
_FILENAME = re.compile(rb'[;\s]filename\*?=', re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Form:
    raw: bytes
    fields: dict[str, str]  # the small text parts, by name (the first of a repeated name)
    spans: dict[str, tuple[int, int]]  # where each kept field's value lies in `raw`
    files: tuple[str, ...]  # the names of the file parts
    repeated: frozenset[str]  # text field names given more than once (`timestamp_granularities[]`)

    def with_value(self, name: str, value: str) -> bytes:
        """The body with field `name`'s value replaced (one copy of the body)."""
        start, end = self.spans[name]
        return self.raw[:start] + value.encode() + self.raw[end:]


def boundary_of(content_type: str) -> str | None:
    """The boundary of a `multipart/form-data` Content-Type, else None."""
    media = content_type.partition(";")[0].strip().lower()
    if media != "multipart/form-data":
        return None
    match = _BOUNDARY.search(content_type)
    if match is None:
        raise InvalidRequest("The multipart/form-data Content-Type has no boundary.")
    return match.group(1) or match.group(2)


def read_form(raw: bytes, boundary: str) -> Form:
    """The form's small fields and file part names (see the module doc)."""
    delimiter = b"--" + boundary.encode("latin1")
    pos = raw.find(delimiter)
    if pos < 0:
        raise InvalidRequest("The multipart body does not contain its boundary.")
    fields: dict[str, str] = {}
    spans: dict[str, tuple[int, int]] = {}
    files: list[str] = []
    repeated: set[str] = set()
    separator = b"\r\n" + delimiter
    for _ in range(PARTS_MAX):
        pos += len(delimiter)
        if raw[pos : pos + 2] == b"--":  # the closing delimiter
            return Form(raw, fields, spans, tuple(files), frozenset(repeated))
        head_start = raw.find(b"\r\n", pos)
        if head_start < 0:
            break
        head_start += 2
        head_end = raw.find(b"\r\n\r\n", head_start, head_start + HEAD_MAX)
        if head_end < 0:
            raise InvalidRequest("A part of the multipart body has no end to its headers.")
        value_start = head_end + 4
        value_end = raw.find(separator, value_start)
        if value_end < 0:
            break
        _part(raw[head_start:head_end], raw, value_start, value_end, fields, spans, files, repeated)
        pos = value_end + 2
    raise InvalidRequest("The multipart body is cut short: it has no closing boundary.")


def _part(
    head: bytes, raw: bytes, start: int, end: int,
    fields: dict[str, str], spans: dict[str, tuple[int, int]], files: list[str], repeated: set[str],
) -> None:
    disposition = b""
    for line in head.split(b"\r\n"):
        if line[:20].lower().startswith(b"content-disposition:"):
            disposition = line
    named = _NAME.search(disposition)
    if named is None:
        raise InvalidRequest("A part of the multipart body has no Content-Disposition name.")
    name = (named.group(1) if named.group(1) is not None else named.group(2)).decode("utf-8", "replace")
    if _FILENAME.search(disposition) is not None:
        files.append(name)
    elif name in fields:
        repeated.add(name)
    elif end - start <= FIELD_MAX:
        try:
            fields[name] = raw[start:end].decode("utf-8")
        except UnicodeDecodeError:  # not text the router reads: left to the upstream
            return
        spans[name] = (start, end)
