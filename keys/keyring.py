"""The compiled key set a web process authenticates against (pure, no Django).

Invariants:
- Only SHA-256 hex digests of keys are held; a plaintext key never reaches
  this module except as the argument of `hash_key`.
- A `KeyRecord` never prints its hash: repr/str show id, name and the masked
  hint only.
- A `Keyring` is immutable once built; a web process swaps it by reference
  with the routing snapshot.
- A key whose IP allowlist was set but contained no usable entry is
  restricted to *nothing* (fail closed), never widened to "any address".
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import immutables

from router.core.ipnets import Network, parse_networks

SOURCE_OPERATOR = "operator"
SOURCE_COORDINATOR = "coordinator"


def hash_key(plaintext: str) -> str:
    """SHA-256 hex digest of a presented or issued key (what is stored)."""
    return hashlib.sha256(plaintext.encode("utf-8", "surrogatepass")).hexdigest()


def mask_key(plaintext: str) -> str:
    """The display hint of a key: `sk-…a1b2` (prefix and last four only)."""
    prefix = "sk-" if plaintext.startswith("sk-") else ""
    return f"{prefix}…{plaintext[-4:]}"


def limiter_bucket(key_hash: str) -> str:
    """A stable rate-limit bucket name for a key, the same on every node.

    Derived from the hash (so one key shares one bucket across nodes, even
    when nodes keep separate databases) but not the hash itself, so a shared
    Redis never holds the stored credential digest.
    """
    return hashlib.sha256(b"keys.ratelimit:" + key_hash.encode()).hexdigest()[:32]


class KeyRecord(NamedTuple):
    """One key as the gate sees it. A tuple: immutable, and built without the
    per-field ``object.__setattr__`` of a frozen dataclass (a third of a
    100,000-key compile). Its repr never shows the hash or the bucket."""

    id: str  # "operator:<pk>" or "coordinator:<key_id>"
    name: str
    source: str
    key_hash: str
    allowed_models: frozenset[str] = frozenset()  # empty = every model
    expires_at: float | None = None  # epoch seconds; expired when <= now
    rate_limit: int | None = None  # requests per 60 s; None = unlimited
    networks: tuple[Network, ...] = ()
    hint: str = ""
    owner: str = ""
    ip_restricted: bool = False  # an allowlist was set (even if none parsed)
    bucket: str = ""

    def allows_model(self, name: str) -> bool:
        return not self.allowed_models or name in self.allowed_models

    def __repr__(self) -> str:
        return (
            f"KeyRecord(id={self.id!r}, name={self.name!r}, source={self.source!r}, "
            f"allowed_models={self.allowed_models!r}, expires_at={self.expires_at!r}, "
            f"rate_limit={self.rate_limit!r}, networks={self.networks!r}, hint={self.hint!r}, "
            f"owner={self.owner!r}, ip_restricted={self.ip_restricted!r})"
        )

    def __str__(self) -> str:
        return self.__repr__()


def make_record(
    *,
    id: str,
    name: str,
    source: str,
    key_hash: str,
    allowed_models: Iterable[str] = (),
    expires_at: float | None = None,
    rate_limit: int | None = None,
    allowed_client_ips: Iterable[str] = (),
    hint: str = "",
    owner: str = "",
) -> KeyRecord:
    """Build a record from stored fields; bad IP entries are skipped (logged).
    Only a rate-limited key gets a bucket (a SHA-256 each, at 100,000 keys)."""
    entries = [str(e) for e in allowed_client_ips if str(e).strip()] if allowed_client_ips else ()
    digest = key_hash.lower()
    limit = rate_limit if rate_limit and rate_limit > 0 else None
    return KeyRecord(
        id=id,
        name=name,
        source=source,
        key_hash=digest,
        allowed_models=frozenset(allowed_models),
        expires_at=expires_at,
        rate_limit=limit,
        networks=parse_networks(entries, strict=False) if entries else (),
        hint=hint,
        owner=owner,
        ip_restricted=bool(entries),
        bucket=limiter_bucket(digest) if limit is not None else "",
    )


def _map(pairs: Iterable[tuple[str, Any]]) -> immutables.Map:
    """A persistent map of `pairs`, built CHUNK entries per C call: a
    100,000-key build never holds the interpreter for more than one chunk."""
    built: immutables.Map = immutables.Map()
    chunk: dict[str, Any] = {}
    for k, v in pairs:
        chunk[k] = v
        if len(chunk) >= CHUNK:
            built, chunk = built.update(chunk), {}
    return built.update(chunk) if chunk else built


CHUNK = 500  # ~0.7 ms of C per update() at 100,000 keys


class Keyring(Mapping[str, KeyRecord]):
    """sha256-hex → KeyRecord, immutable.

    Two persistent maps (`immutables.Map`, a hash array mapped trie): by
    digest and by record id. A change builds new maps that share every
    untouched entry with the old ones, in microseconds per key at 100,000
    keys, and the old keyring is never changed (a request keeps the one it
    started with). A lookup is one map read."""

    __slots__ = ("_by_hash", "_by_id")

    def __init__(self, records: Iterable[KeyRecord] = ()) -> None:
        self._by_hash: immutables.Map = _map((r.key_hash, r) for r in records)
        self._by_id: immutables.Map = _map((r.id, h) for h, r in self._by_hash.items())

    def replaced(self, ids: Iterable[str], records: Iterable[KeyRecord]) -> Keyring:
        """A new keyring: the keys `ids` as `records` now say (an id with no
        record is gone); every other record is shared with this one."""
        by_hash, by_id = self._by_hash.mutate(), self._by_id.mutate()
        for ident in ids:
            old = by_id.pop(ident, None)
            if old is not None:
                record = by_hash.get(old)
                if record is not None and record.id == ident:
                    del by_hash[old]
        for record in records:
            clash = by_hash.get(record.key_hash)
            if clash is not None and clash.id != record.id:
                by_id.pop(clash.id, None)
            previous = by_id.get(record.id)  # the id's old digest (a rotation)
            if previous is not None and previous != record.key_hash:
                held = by_hash.get(previous)
                if held is not None and held.id == record.id:
                    del by_hash[previous]
            by_hash[record.key_hash] = record
            by_id[record.id] = record.key_hash
        ring = Keyring.__new__(Keyring)
        ring._by_hash, ring._by_id = by_hash.finish(), by_id.finish()
        return ring

    def by_hash(self) -> immutables.Map:
        """digest → record, for a caller that looks keys up per request
        (one read, no Mapping indirection). Immutable."""
        return self._by_hash

    def __getitem__(self, key_hash: str) -> KeyRecord:
        return self._by_hash[key_hash]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_hash)

    def __len__(self) -> int:
        return len(self._by_hash)

    def __contains__(self, key_hash: object) -> bool:
        return key_hash in self._by_hash

    def get(self, key_hash: str, default=None):  # type: ignore[override]
        return self._by_hash.get(key_hash, default)

    def lookup(self, plaintext: str) -> KeyRecord | None:
        """The record for a presented key, or None.

        The dict lookup is on the digest of the presented value, which an
        attacker cannot steer byte by byte, and the match is then confirmed
        with a constant-time comparison.
        """
        digest = hash_key(plaintext)
        record = self._by_hash.get(digest)
        if record is None or not hmac.compare_digest(record.key_hash, digest):
            return None
        return record

    def record_of(self, key_id: str) -> KeyRecord | None:
        """The record of a key by its id ("operator:<pk>", …), or None: for
        work done on a key's behalf after its request (a batch's lines)."""
        digest = self._by_id.get(key_id)
        return None if digest is None else self._by_hash.get(digest)

    def __repr__(self) -> str:
        return f"<Keyring {len(self._by_hash)} keys>"

    __str__ = __repr__


EMPTY = Keyring()
