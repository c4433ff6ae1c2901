"""The small fields of a `multipart/form-data` body, read as it arrives.

The OpenAI endpoints that take a file (`/v1/audio/transcriptions`,
`/v1/images/edits`, …) name their model in a form field beside the file.
The router needs that field, and a few other small ones (`stream`), to
route and to check the key; it never needs the file. So the body is fed to a
`FormReader` chunk by chunk as it comes from the client (while it is
spooled, router/spool.py): the reader finds the part boundaries with
`bytes.find` and keeps only what it must — an unfinished part head, a text
part's value (no `filename`) of up to `FIELD_MAX` bytes, and the last few
bytes of anything else, in case a boundary straddles two chunks. A file's
bytes pass through it and are never kept. What goes upstream is the client's
body as it came, or that body with the one `model` value replaced (its place
in the body is `Form.spans["model"]`).

Bounded: at most `PARTS_MAX` parts; a part header block is at most
`HEAD_MAX` bytes; what the reader holds is at most about
`HEAD_MAX + FIELD_MAX` bytes whatever the body's size. Anything malformed is
a 400 naming what is wrong.
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

# FormReader states
_PREAMBLE, _OPENED, _HEAD, _VALUE, _DONE = range(5)


@dataclass(frozen=True, slots=True)
class Form:
    fields: dict[str, str]  # the small text parts, by name (the first of a repeated name)
    spans: dict[str, tuple[int, int]]  # where each kept field's value lies in the body
    files: tuple[str, ...]  # the names of the file parts
    repeated: frozenset[str]  # text field names given more than once (`timestamp_granularities[]`)


def boundary_of(content_type: str) -> str | None:
    """The boundary of a `multipart/form-data` Content-Type, else None."""
    media = content_type.partition(";")[0].strip().lower()
    if media != "multipart/form-data":
        return None
    match = _BOUNDARY.search(content_type)
    if match is None:
        raise InvalidRequest("The multipart/form-data Content-Type has no boundary.")
    return match.group(1) or match.group(2)


class FormReader:
    """`feed` the body's chunks in order, then `finish` for the `Form` (see
    the module doc). Raises InvalidRequest as soon as the body is malformed."""

    __slots__ = (
        "_base",
        "_buf",
        "_delimiter",
        "_keep",
        "_name",
        "_parts",
        "_separator",
        "_state",
        "fields",
        "files",
        "repeated",
        "spans",
    )

    def __init__(self, boundary: str) -> None:
        self._delimiter = b"--" + boundary.encode("latin1")
        self._separator = b"\r\n" + self._delimiter
        self._buf = bytearray()
        self._base = 0  # where `_buf` begins in the body
        self._state = _PREAMBLE
        self._parts = 0
        self._name = ""
        self._keep = False  # the current part's value is a field to read
        self.fields: dict[str, str] = {}
        self.spans: dict[str, tuple[int, int]] = {}
        self.files: list[str] = []
        self.repeated: set[str] = set()

    def feed(self, chunk: bytes) -> None:
        if self._state == _DONE or not chunk:
            return  # the epilogue after the closing delimiter is not read
        self._buf += chunk
        while self._step():
            pass

    def finish(self) -> Form:
        if self._state == _PREAMBLE:
            raise InvalidRequest("The multipart body does not contain its boundary.")
        if self._state != _DONE:
            raise InvalidRequest("The multipart body is cut short: it has no closing boundary.")
        return Form(self.fields, self.spans, tuple(self.files), frozenset(self.repeated))

    def _drop(self, n: int) -> None:
        del self._buf[:n]
        self._base += n

    def _step(self) -> bool:
        """One move of the state machine; False when it needs more bytes."""
        buf, state = self._buf, self._state
        if state == _PREAMBLE:
            pos = buf.find(self._delimiter)
            if pos < 0:
                self._drop(max(0, len(buf) - len(self._delimiter) + 1))
                return False
            self._drop(pos + len(self._delimiter))
            self._state = _OPENED
            return True
        if state == _OPENED:  # just past a delimiter: the closing `--`, or the line's end
            if len(buf) < 2:
                return False
            if buf[:2] == b"--":
                self._state = _DONE
                self._drop(len(buf))
                return False
            end = buf.find(b"\r\n", 0, HEAD_MAX)
            if end < 0:
                if len(buf) >= HEAD_MAX:
                    raise InvalidRequest("A part of the multipart body has no end to its headers.")
                return False
            self._drop(end + 2)
            self._state = _HEAD
            return True
        if state == _HEAD:
            end = buf.find(b"\r\n\r\n", 0, HEAD_MAX)
            if end < 0:
                if len(buf) >= HEAD_MAX:
                    raise InvalidRequest("A part of the multipart body has no end to its headers.")
                return False
            self._parts += 1
            if self._parts > PARTS_MAX:
                raise InvalidRequest(f"The multipart body has more than {PARTS_MAX} parts.")
            self._begin_part(bytes(buf[:end]))
            self._drop(end + 4)
            self._state = _VALUE
            return True
        # _VALUE: up to the next delimiter, which begins with CRLF
        sep = self._separator
        end = buf.find(sep)
        if end < 0:
            if self._keep and len(buf) <= FIELD_MAX + len(sep):
                return False  # the field's value is still arriving
            self._keep = False  # a file, or a field too long to read: not kept
            self._drop(max(0, len(buf) - len(sep) + 1))
            return False
        if self._keep and end <= FIELD_MAX:
            try:
                self.fields[self._name] = buf[:end].decode("utf-8")
                self.spans[self._name] = (self._base, self._base + end)
            except UnicodeDecodeError:  # not text the router reads: left to the upstream
                pass
        self._drop(end + len(sep))
        self._state = _OPENED
        return True

    def _begin_part(self, head: bytes) -> None:
        disposition = b""
        for line in head.split(b"\r\n"):
            if line[:20].lower().startswith(b"content-disposition:"):
                disposition = line
        named = _NAME.search(disposition)
        if named is None:
            raise InvalidRequest("A part of the multipart body has no Content-Disposition name.")
        name = (named.group(1) if named.group(1) is not None else named.group(2)).decode("utf-8", "replace")
        self._name, self._keep = name, False
        if _FILENAME.search(disposition) is not None:
            self.files.append(name)
        elif name in self.fields or name in self.repeated:
            self.repeated.add(name)
        else:
            self._keep = True


def read_form(raw: bytes, boundary: str) -> Form:
    """The form of a body held whole (see the module doc)."""
    reader = FormReader(boundary)
    reader.feed(raw)
    return reader.finish()
