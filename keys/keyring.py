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


_GONE = None  # an overlay entry: the key is not in the keyring


def _apply(base: dict[str, Any], over: Mapping[str, Any]) -> None:
    for k, v in over.items():
        if v is _GONE:
            base.pop(k, None)
        else:
            base[k] = v


class Keyring(Mapping[str, KeyRecord]):
    """sha256-hex → KeyRecord, immutable.

    A base (shared by reference between keyrings) and a small overlay of the
    keys changed since it was built: a change copies only the overlay, not
    100,000 records (~12 ms of the interpreter in every web process per key
    revocation). Past COMPACT overlay entries the next change builds a new
    base, so a lookup stays two dict reads at most."""

    __slots__ = ("_base", "_base_ids", "_len", "_over", "_over_ids")

    COMPACT = 1024

    def __init__(self, records: Iterable[KeyRecord] = ()) -> None:
        self._base: dict[str, KeyRecord] = {r.key_hash: r for r in records}
        self._base_ids: dict[str, str] = {r.id: h for h, r in self._base.items()}
        self._over: dict[str, KeyRecord | None] = {}
        self._over_ids: dict[str, str | None] = {}
        self._len = len(self._base)

    def _record(self, key_hash: str) -> KeyRecord | None:
        over = self._over
        if key_hash in over:
            return over[key_hash]
        return self._base.get(key_hash)

    def _hash(self, ident: str) -> str | None:
        over = self._over_ids
        if ident in over:
            return over[ident]
        return self._base_ids.get(ident)

    def replaced(self, ids: Iterable[str], records: Iterable[KeyRecord]) -> Keyring:
        """A new keyring: the keys `ids` as `records` now say (an id with no
        record is gone); every other record is shared with this one."""
        ring = Keyring.__new__(Keyring)
        ring._base, ring._base_ids, ring._len = self._base, self._base_ids, self._len
        ring._over, ring._over_ids = dict(self._over), dict(self._over_ids)
        touched: set[str] = set()
        for ident in ids:
            old = ring._hash(ident)
            if old is not None:
                ring._over_ids[ident] = _GONE
                record = ring._record(old)
                if record is not None and record.id == ident:
                    ring._over[old] = _GONE
                    touched.add(old)
        for record in records:
            clash = ring._record(record.key_hash)
            if clash is not None and clash.id != record.id:
                ring._over_ids[clash.id] = _GONE
            ring._over[record.key_hash] = record
            ring._over_ids[record.id] = record.key_hash
            touched.add(record.key_hash)
        ring._len += sum((ring._record(h) is not None) - (self._record(h) is not None) for h in touched)
        if len(ring._over) + len(ring._over_ids) > self.COMPACT:
            ring._compact()
        return ring

    def _compact(self) -> None:
        # A copy of the base (one C loop) with the overlay applied: a filter
        # of 100,000 entries in Python was ~10x the time.
        base, ids = self._base.copy(), self._base_ids.copy()
        _apply(base, self._over)
        _apply(ids, self._over_ids)
        self._base, self._base_ids, self._over, self._over_ids = base, ids, {}, {}

    def layers(self) -> tuple[dict[str, KeyRecord | None], dict[str, KeyRecord]]:
        """(overlay, base) for a caller that looks keys up per request: the
        overlay first (None: gone), then the base. Neither may be changed."""
        return self._over, self._base

    def __getitem__(self, key_hash: str) -> KeyRecord:
        record = self._record(key_hash)
        if record is None:
            raise KeyError(key_hash)
        return record

    def __iter__(self) -> Iterator[str]:
        over = self._over
        for h in self._base:
            if h not in over:
                yield h
        for h, r in over.items():
            if r is not None:
                yield h

    def __len__(self) -> int:
        return self._len

    def __contains__(self, key_hash: object) -> bool:
        return isinstance(key_hash, str) and self._record(key_hash) is not None

    def get(self, key_hash: str, default=None):  # type: ignore[override]
        record = self._record(key_hash)
        return default if record is None else record

    def lookup(self, plaintext: str) -> KeyRecord | None:
        """The record for a presented key, or None.

        The dict lookup is on the digest of the presented value, which an
        attacker cannot steer byte by byte, and the match is then confirmed
        with a constant-time comparison.
        """
        digest = hash_key(plaintext)
        record = self._record(digest)
        if record is None or not hmac.compare_digest(record.key_hash, digest):
            return None
        return record

    def __repr__(self) -> str:
        return f"<Keyring {self._len} keys>"

    __str__ = __repr__


EMPTY = Keyring()
