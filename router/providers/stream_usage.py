"""Usage on every OpenAI-compatible stream, asked for by the router.

A Chat Completions or Completions stream reports its token usage only when
the client asks (`stream_options.include_usage`); a client that does not ask
records no tokens against its key. So the passthrough asks on the client's
behalf (`asked_body`) and takes back out what the asking added
(`UsageTaken`), so that the client's stream is the one it would have got:

- OpenAI (and vLLM's Completions) put `"usage":null` in every chunk of a
  stream that asked; vLLM's Chat Completions leaves the key out (pydantic's
  `exclude_unset`). Every top-level `"usage":null` is removed.
- Each asks for one more event before `data: [DONE]`: the usage chunk, with
  `"choices":[]` and the `usage` object. It is read, counted and dropped
  with the blank line that ends it.

A usage object inside a chunk that has choices (a server that always sends
one in its last chunk, as llama.cpp's does) is read and left alone: the
client would have seen it anyway.

`"usage":null` never occurs inside a JSON string (a quote in a string is
escaped), so the removal touches keys only. Pure: whole lines in, whole
lines out (router/providers/framing.py `Lines` cuts them), no I/O.
"""

from __future__ import annotations

from typing import Any

import orjson

# The endpoints whose streams carry usage only when asked.
ASKING_ENDPOINTS = frozenset({"chat/completions", "completions"})

_NULLS = (b',"usage":null', b', "usage": null', b'"usage":null,', b'"usage": null, ')
_KEY = b'"usage"'


def asks(body: dict[str, Any], endpoint: str, stream: bool) -> bool:
    """True when the router should ask for the usage the client did not.

    Not when the client asked itself, nor when its `stream_options` ask for
    something asking would change (vLLM's `continuous_usage_stats` adds
    usage to every chunk once `include_usage` is set), nor when they are
    not an object (the upstream's to refuse, unchanged)."""
    if not stream or endpoint not in ASKING_ENDPOINTS:
        return False
    options = body.get("stream_options")
    if options is None:
        return True
    if not isinstance(options, dict):
        return False
    return not options.get("include_usage") and not options.get("continuous_usage_stats")


def asked_body(raw: bytes, body: dict[str, Any], served: str) -> bytes:
    """The request body with `stream_options.include_usage: true` (and the
    served model name). A body without `stream_options` whose model needs
    no rewrite keeps the client's bytes, the field appended at its end (the
    door refused duplicate top-level keys, so it is the only one)."""
    if "stream_options" not in body and body.get("model") == served:
        text = raw.rstrip()
        if text.endswith(b"}"):
            head = text[:-1].rstrip()
            return head + (b"" if head.endswith(b"{") else b",") + b'"stream_options":{"include_usage":true}}'
    options = body.get("stream_options")
    out = dict(body)
    out["model"] = served
    out["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return orjson.dumps(out)


class UsageTaken:
    """Takes the asked-for usage back out of a stream, block by block of
    whole lines (`__call__`); `usage` is the usage object read, if any."""

    __slots__ = ("_blank", "usage")

    def __init__(self) -> None:
        self.usage: dict | None = None
        self._blank = False  # the blank line ending a dropped event is still to come

    def __call__(self, block: bytes) -> bytes:
        if self._blank:
            block = self._after_dropped(block)
        if _KEY not in block:
            return block
        for null in _NULLS:
            if null in block:
                block = block.replace(null, b"")
        if _KEY not in block:
            return block
        return self._usage_events(block)

    def _after_dropped(self, block: bytes) -> bytes:
        if not block:
            return block
        self._blank = False
        if block.startswith(b"\n"):
            return block[1:]
        if block.startswith(b"\r\n"):
            return block[2:]
        return block  # no blank line: the next event began at once

    def _usage_events(self, block: bytes) -> bytes:
        """The block with the usage-only event left out (rare: once a stream)."""
        lines = block.split(b"\n")
        out: list[bytes] = []
        skip_blank = False
        last = len(lines) - 1
        for i, line in enumerate(lines):
            if skip_blank:
                skip_blank = False
                if not line.rstrip(b"\r"):
                    continue
            if _KEY in line and line.startswith(b"data:") and self._usage_only(line[5:]):
                if i == last or (i == last - 1 and not lines[last]):
                    self._blank = True  # its blank line comes in a later block
                    out.append(b"")
                    break
                skip_blank = True
                continue
            out.append(line)
        return b"\n".join(out)

    def _usage_only(self, data: bytes) -> bool:
        """Read the usage of one event; True when the event is the usage chunk."""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(obj, dict) or not isinstance(obj.get("usage"), dict):
            return False
        self.usage = obj["usage"]
        return obj.get("choices") == []
