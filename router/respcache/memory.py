"""The memory tier: one LRU per web process, bounded by bytes. Pure.

An entry counts its body plus a fixed overhead (ENTRY_OVERHEAD, the
bookkeeping around it), and the tier never holds more than `max_bytes` of
them: a put evicts the least recently used entries first, and an entry that
could never fit is not taken. Entries expire at their absolute time (epoch
seconds, the same on every node, so an entry filled from Redis keeps the
age it had there); an expired entry is dropped when it is next looked at.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

ENTRY_OVERHEAD = 256  # bytes of the entry object, its key and the LRU's node, roughly


@dataclass(frozen=True, slots=True)
class Entry:
    """A stored answer: the whole object as the client's non-streamed answer
    would be (OpenAI's shape; a chat completion for the Anthropic door)."""

    body: bytes
    stored_at: float  # epoch seconds
    expires: float  # epoch seconds
    model: str  # the model routed to (purge by model)
    usage: bool  # the answer says its usage (a request that asks for it needs it)

    @property
    def size(self) -> int:
        return len(self.body) + ENTRY_OVERHEAD


class MemoryTier:
    __slots__ = ("_entries", "bytes", "max_bytes")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[bytes, Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, name: bytes, now: float) -> Entry | None:
        entries = self._entries
        entry = entries.get(name)
        if entry is None:
            return None
        if entry.expires <= now:
            self._drop(name)
            return None
        entries.move_to_end(name)
        return entry

    def put(self, name: bytes, entry: Entry) -> bool:
        """Keep `entry` (replacing one of the same name); False when it can never fit."""
        size = entry.size
        if size > self.max_bytes:
            return False
        if name in self._entries:
            self._drop(name)
        self._entries[name] = entry
        self.bytes += size
        self.shrink(self.max_bytes)
        return True

    def shrink(self, max_bytes: int) -> None:
        """Evict the least recently used entries until at most `max_bytes` are held."""
        self.max_bytes = max_bytes
        entries = self._entries
        while self.bytes > max_bytes and entries:
            _, old = entries.popitem(last=False)
            self.bytes -= old.size

    def purge(self, model: str | None = None) -> int:
        """Drop every entry (of `model`); how many were dropped."""
        if model is None:
            count = len(self._entries)
            self._entries.clear()
            self.bytes = 0
            return count
        names = [name for name, entry in self._entries.items() if entry.model == model]
        for name in names:
            self._drop(name)
        return len(names)

    def _drop(self, name: bytes) -> None:
        entry = self._entries.pop(name)
        self.bytes -= entry.size
