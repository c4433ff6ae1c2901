"""A supervised child's log file: where `runnode` sends a child's output
instead of the terminal (node/supervisor.py).

Invariants:
- A child's stdout and stderr go to one file opened for appending
  (O_APPEND): every writer (the child after a restart, several uvicorn
  workers sharing the descriptor) adds at the end, and after a trim empties
  the file the next write lands at its start.
- The file is bounded: once it holds more than `limit` bytes its content is
  copied to `<file>.1` (the one previous part, replaced) and the file is
  emptied, so a child keeps at most about twice `limit` on disk. A line
  written between the copy and the emptying is lost (logrotate's
  copytruncate has the same window).
- `notable()` returns the warnings and errors written since its last call:
  the router's JSON lines at level warning or above, and uvicorn's
  `WARNING:` / `ERROR:` lines; banners, request lines and tracebacks stay in
  the file. It reads at most READ_MAX bytes a call (a burst past that is
  skipped), so a child that floods its log cannot stall the supervisor.
- Each spawn first writes a `--- <name> started at <UTC time> ---` line, so
  the runs of a child (restarts, earlier nodes) are told apart.
- `tail()` is the end of what this node's children wrote (never an earlier
  run's), for a child that could not start.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import orjson

READ_MAX = 1 << 20
NOTABLE_LEVELS = frozenset({"warning", "error", "critical"})
_JSON_MARKS = tuple(f'"level":"{level}"'.encode() for level in NOTABLE_LEVELS)
_PLAIN_MARKS = (b"WARNING:", b"ERROR:", b"CRITICAL:")
LINE_MAX = 500  # characters of one echoed line


@dataclass(slots=True)
class ChildLog:
    path: Path
    offset: int = 0  # what notable() has read
    since: int = 0  # where this node's output begins

    def open(self, name: str) -> BinaryIO:
        """The file a (re)spawned child writes to, its start marked; the caller
        closes its copy."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        out = self.path.open("ab")
        out.write(f"--- {name} started at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} ---\n".encode())
        out.flush()
        return out

    def start(self) -> None:
        """Only what is written from now on is notable, and tail() shows only
        that (not a previous run's)."""
        self.offset = self.since = _size(self.path)

    def trim(self, limit: int) -> bool:
        """Move the content to `<file>.1` and empty the file once it is over
        `limit` bytes; True when it did."""
        if _size(self.path) <= limit:
            return False
        shutil.copyfile(self.path, self.path.with_name(self.path.name + ".1"))
        os.truncate(self.path, 0)
        self.offset = self.since = 0
        return True

    def notable(self) -> list[tuple[str, str]]:
        """(level, message) of each warning or error written since the last call."""
        size = _size(self.path)
        if size < self.offset:  # emptied by trim() or by hand
            self.offset = self.since = 0
        if size == self.offset:
            return []
        self.offset = max(self.offset, size - READ_MAX)
        with self.path.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read(size - self.offset)
        end = chunk.rfind(b"\n") + 1
        if end == 0:  # a line still being written; or one longer than READ_MAX, skipped
            if len(chunk) >= READ_MAX:
                self.offset += len(chunk)
            return []
        self.offset += end
        return [found for line in chunk[:end].splitlines() if (found := _notable(line)) is not None]

    def tail(self, lines: int = 20) -> str:
        size = _size(self.path)
        try:
            with self.path.open("rb") as f:
                f.seek(max(size - 64 * 1024, self.since if self.since <= size else 0))
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _notable(line: bytes) -> tuple[str, str] | None:
    if line.startswith(b"{") and any(mark in line for mark in _JSON_MARKS):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if isinstance(record, dict) and record.get("level") in NOTABLE_LEVELS:
            return str(record["level"]), str(record.get("msg", ""))[:LINE_MAX]
        return None
    if line.startswith(_PLAIN_MARKS):
        level, _, message = line.decode(errors="replace").partition(":")
        return level.lower(), message.strip()[:LINE_MAX]
    return None
