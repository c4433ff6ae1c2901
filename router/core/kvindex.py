"""Which replica holds which prompt prefix: the bounded index of `cache_aware`.

A prompt is cut into fixed-size blocks of text and each block is named by a
hash CHAINED over every block before it (`chain`), the way vLLM and SGLang
name their KV-cache blocks: block i's name stands for the whole prompt up to
the end of block i. The index maps a block's name to the few replicas that
were recently sent a prompt containing it. A new prompt's match on a replica
is the length of its leading run of blocks that replica holds.

Invariants:
- Bounded: at most `max_entries` block names, whatever the traffic. Two
  generations (the newest half, the older half): a name looked up or written
  lives in the newest; when the newest is full, the older is dropped whole and
  the newest becomes the older. Recency without an ordered structure: an
  insert or a lookup is a dict operation, never a scan.
- At most `HOLDERS` replicas per block (the newest first): a block every
  replica holds carries no choice anyway.
- Forgetting a replica (drained, restarted, unhealthy, gone from the
  snapshot) is O(1): every replica has an epoch, entries record the epoch
  they were written under, and a new epoch makes the old entries dead.
  Epochs are drawn from one counter, so a name that leaves and comes back
  never revives its old entries.
- Per process, like the in-flight counts: each web process learns from the
  requests it routed. Block names use Python's (per-process salted) string
  hash, which never leaves the process.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping

HOLDERS = 4
DEFAULT_BLOCK_CHARS = 128
DEFAULT_MAX_ENTRIES = 131_072
DEFAULT_MAX_PROMPT_CHARS = 65_536
# Measured with tracemalloc (tests/router/core/test_kvindex.py): an entry
# with one holder, key and dict slot included, on CPython 3.11.
BYTES_PER_ENTRY = 128

_Entry = tuple[tuple[str, int], ...]


def chain(seed: int, text: str, block_chars: int, max_chars: int) -> tuple[int, ...]:
    """Chained hashes of `text`'s full blocks (a partial last block is left
    out: too short a prompt has no chain), up to `max_chars`."""
    end = min(len(text), max_chars)
    end -= end % block_chars
    h = seed
    out = []
    for i in range(0, end, block_chars):
        h = hash((h, text[i : i + block_chars]))
        out.append(h)
    return tuple(out)


class PrefixIndex:
    """Block name → the replicas recently sent it (see the module doc)."""

    __slots__ = ("_epoch_of", "_epochs", "_half", "_new", "_old")

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 2:
            raise ValueError(f"max_entries must be at least 2, not {max_entries!r}")
        self._half = max_entries // 2
        self._new: dict[int, _Entry] = {}
        self._old: dict[int, _Entry] = {}
        self._epoch_of: dict[str, int] = {}
        self._epochs = itertools.count(1)

    @property
    def max_entries(self) -> int:
        return self._half * 2

    def __len__(self) -> int:
        return len(self._new) + len(self._old)

    def match(self, blocks: tuple[int, ...]) -> dict[str, int]:
        """Per live replica, how many leading blocks of `blocks` it holds
        (replicas holding none are absent)."""
        depth_of: dict[str, int] = {}
        new, old, epoch_of = self._new, self._old, self._epoch_of
        depth = 0
        for h in blocks:
            entry = new.get(h)
            if entry is None:
                entry = old.get(h)
                if entry is None:
                    break
            depth += 1
            alive = False
            for name, epoch in entry:
                if epoch_of.get(name) == epoch:
                    depth_of[name] = depth
                    alive = True
            if not alive:
                break
        return depth_of

    def insert(self, blocks: tuple[int, ...], name: str) -> None:
        """`name` was sent a prompt of these blocks: it holds them now."""
        epoch = self._epoch_of.get(name)
        if epoch is None:
            epoch = self._epoch_of[name] = next(self._epochs)
        mine = (name, epoch)
        new, old, epoch_of = self._new, self._old, self._epoch_of
        for h in blocks:
            entry = new.get(h)
            if entry is not None and entry[0] == mine:
                continue  # already the newest holder, and in the newest generation
            if entry is None:
                entry = old.get(h, ())
            kept = [mine]
            for holder in entry:
                if holder[0] != name and epoch_of.get(holder[0]) == holder[1] and len(kept) < HOLDERS:
                    kept.append(holder)
            new[h] = tuple(kept)
            if len(new) >= self._half:
                self._old = old = new
                self._new = new = {}

    def drop(self, blocks: tuple[int, ...], name: str) -> None:
        """`name` turned out not to hold these blocks (the backend reported no
        cached tokens): it stops being a holder of them."""
        for generation in (self._new, self._old):
            for h in blocks:
                entry = generation.get(h)
                if entry is not None and any(holder[0] == name for holder in entry):
                    kept = tuple(holder for holder in entry if holder[0] != name)
                    if kept:
                        generation[h] = kept
                    else:
                        del generation[h]

    def forget(self, name: str) -> None:
        """Everything `name` was said to hold is gone (its cache went with a
        restart, a drain, an outage). O(1): its entries die with its epoch."""
        self._epoch_of.pop(name, None)

    def clear(self) -> None:
        """Forget everything (an operator's purge): every replica's entries
        die with its epoch, and the two generations start empty."""
        self._new = {}
        self._old = {}
        self._epoch_of.clear()

    def retain(self, names: Collection[str] | Mapping[str, object]) -> None:
        """Forget every replica not in `names` (gone from the snapshot)."""
        gone = [n for n in self._epoch_of if n not in names]
        for name in gone:
            del self._epoch_of[name]

    def replicas(self) -> int:
        """How many replicas the index holds prefixes of."""
        return len(self._epoch_of)
