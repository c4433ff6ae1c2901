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
from dataclasses import dataclass, field

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


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: str  # "operator:<pk>" or "coordinator:<key_id>"
    name: str
    source: str
    key_hash: str = field(repr=False)
    allowed_models: frozenset[str] = frozenset()  # empty = every model
    expires_at: float | None = None  # epoch seconds; expired when <= now
    rate_limit: int | None = None  # requests per 60 s; None = unlimited
    networks: tuple[Network, ...] = ()
    hint: str = ""
    owner: str = ""
    ip_restricted: bool = False  # an allowlist was set (even if none parsed)
    bucket: str = field(default="", repr=False)

    def allows_model(self, name: str) -> bool:
        return not self.allowed_models or name in self.allowed_models


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
    """Build a record from stored fields; bad IP entries are skipped (logged)."""
    entries = [str(e) for e in allowed_client_ips if str(e).strip()]
    return KeyRecord(
        id=id,
        name=name,
        source=source,
        key_hash=key_hash.lower(),
        allowed_models=frozenset(allowed_models),
        expires_at=expires_at,
        rate_limit=rate_limit if rate_limit and rate_limit > 0 else None,
        networks=parse_networks(entries, strict=False),
        hint=hint,
        owner=owner,
        ip_restricted=bool(entries),
        bucket=limiter_bucket(key_hash.lower()),
    )


class Keyring(Mapping[str, KeyRecord]):
    """sha256-hex → KeyRecord, immutable."""

    __slots__ = ("_by_hash", "_hash_of")

    def __init__(self, records: Iterable[KeyRecord] = ()) -> None:
        self._by_hash: dict[str, KeyRecord] = {r.key_hash: r for r in records}
        self._hash_of: dict[str, str] = {r.id: h for h, r in self._by_hash.items()}

    def replaced(self, ids: Iterable[str], records: Iterable[KeyRecord]) -> Keyring:
        """A new keyring: the keys `ids` as `records` now say (an id with no
        record is gone); every other record is shared with this one."""
        by_hash = dict(self._by_hash)
        hash_of = dict(self._hash_of)
        for ident in ids:
            old = hash_of.pop(ident, None)
            if old is not None and by_hash.get(old) is not None and by_hash[old].id == ident:
                del by_hash[old]
        for record in records:
            clash = by_hash.get(record.key_hash)
            if clash is not None:
                hash_of.pop(clash.id, None)
            by_hash[record.key_hash] = record
            hash_of[record.id] = record.key_hash
        ring = Keyring.__new__(Keyring)
        ring._by_hash = by_hash
        ring._hash_of = hash_of
        return ring

    def __getitem__(self, key_hash: str) -> KeyRecord:
        return self._by_hash[key_hash]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_hash)

    def __len__(self) -> int:
        return len(self._by_hash)

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

    def __repr__(self) -> str:
        return f"<Keyring {len(self._by_hash)} keys>"

    __str__ = __repr__


EMPTY = Keyring()
