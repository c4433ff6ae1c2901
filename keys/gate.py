"""The API-key gate every /v1 request passes (seed §9.7, RTR-4/5, KEY-1/3).

Pure except the rate-limiter call. Built once per routing snapshot by
`gate_for`, the key-gate factory this app registers with router.extensions;
a request keeps the gate of the snapshot it started with.

Blocking mode, in this order:
  no key → 401 missing_api_key; unknown (or revoked) → 401 invalid_api_key;
  expires_at <= now → 401 expired_api_key; client IP outside the key's
  allowlist → 403 ip_not_allowed; over rate_limit requests in the last 60 s →
  429 rate_limit_exceeded with Retry-After. A request refused by an earlier
  step never counts against the rate limit.

Open mode (no key needed): a key that is *currently valid* is applied exactly
as in blocking mode (IP allowlist, rate limit, model allowlist), so operators
can attribute and shape known consumers. Any other credential — absent,
unknown, revoked or expired — is ignored and the request proceeds anonymously
(returns None). Rejecting unknown keys would break open deployments: the
OpenAI SDKs refuse to run without *some* key, so clients send placeholders
such as "EMPTY" or "sk-dummy", and an open router must accept them. (A client
can always drop its key in open mode, so 401-ing a bad one would protect
nothing.)

Models: an unknown name is 404 model_not_found for every caller (it says
nothing about the key); a known name outside a non-empty allowlist is 403.
Names and aliases are gated independently — an alias is allowed only if the
alias itself is listed.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import Literal, cast

from router.core.errors import (
    ClientIpNotAllowed,
    ExpiredApiKey,
    InvalidApiKey,
    MissingApiKey,
    ModelNotAllowed,
    ModelNotFound,
    RateLimited,
)
from router.core.ipnets import ip_allowed
from router.core.snapshot import Snapshot

from .keyring import EMPTY, KeyRecord, Keyring
from .ratelimit import Limiter, limiter_for

Mode = Literal["open", "blocking"]
_sha256 = hashlib.sha256
_compare = hmac.compare_digest


def extract_key(headers: Mapping[str, str]) -> str | None:
    """The presented key: `authorization: Bearer <key>` (scheme in any case),
    else `x-api-key`. Header names must already be lower-case. Blank → None."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, token = auth.strip().partition(" ")
        if scheme.lower() == "bearer":
            token = token.strip()
            if token:
                return token
    key = headers.get("x-api-key")
    if key:
        key = key.strip()
        if key:
            return key
    return None


class KeyGate:
    __slots__ = ("_keys", "_limiter", "_ring", "blocking", "mode")

    def __init__(
        self,
        keyring: Keyring | Mapping[str, KeyRecord] | None,
        mode: Mode,
        limiter: Limiter | None,
    ) -> None:
        if mode not in ("open", "blocking"):
            raise ValueError(
                f"api_keys.mode must be 'open' or 'blocking', not {mode!r}"
            )
        if keyring is None:
            keyring = EMPTY
        self._ring = keyring if isinstance(keyring, Keyring) else Keyring(keyring.values())
        # One map read per request, no Mapping indirection.
        self._keys: Mapping[str, KeyRecord] = keyring.by_hash() if isinstance(keyring, Keyring) else dict(keyring)
        self.mode = mode
        self.blocking = mode == "blocking"
        self._limiter = limiter

    def __repr__(self) -> str:
        return f"<KeyGate {self.mode} {len(self._keys)} keys>"

    @property
    def limiter(self) -> Limiter | None:
        return self._limiter

    def identify(self, headers: Mapping[str, str], now: float) -> None:
        """The 401s of blocking mode, from the headers alone: checked before
        the body is read (router/admission.py `precheck`); `admit` checks
        again. Open mode refuses nothing here."""
        if self.blocking:
            self._valid(headers, now)

    def _valid(self, headers: Mapping[str, str], now: float) -> KeyRecord | None:
        """The presented key's record if it is valid now; else None in open
        mode and the 401 in blocking mode."""
        plaintext = extract_key(headers)
        if plaintext is None:
            if self.blocking:
                raise MissingApiKey()
            return None
        digest = _sha256(plaintext.encode("utf-8", "surrogatepass")).hexdigest()
        record = self._keys.get(digest)
        if record is None or not _compare(record.key_hash, digest):
            if self.blocking:
                raise InvalidApiKey()
            return None
        if record.expires_at is not None and record.expires_at <= now:
            if self.blocking:
                raise ExpiredApiKey()
            return None
        return record

    async def admit(
        self, headers: Mapping[str, str], client_ip: str, now: float
    ) -> KeyRecord | None:
        """The key a request runs under (None = anonymous, open mode only).

        `now` is epoch seconds (wall clock: expiry and the cluster limiter are
        compared across processes). Raises a RouterError on refusal.
        """
        record = self._valid(headers, now)
        if record is None:
            return None
        if record.ip_restricted and not (
            record.networks and ip_allowed(record.networks, client_ip)
        ):
            refusal = ClientIpNotAllowed()
            refusal.key = record
            raise refusal
        if record.rate_limit is not None and self._limiter is not None:
            allowed, retry_after = await self._limiter.acquire(
                record.bucket, record.rate_limit, now
            )
            if not allowed:
                limited = RateLimited(headers={"Retry-After": str(retry_after)})
                limited.key = record
                raise limited
        return record

    async def admit_id(self, key_id: str, now: float, *, count: bool = True) -> KeyRecord | None:
        """The key a job runs under that a request of this key queued (a
        batch's lines): known by its record id, not its plaintext, which the
        router never keeps. The same refusals as `admit` — a key revoked
        since (401 invalid_api_key, or anonymous in open mode), expired, over
        its rate limit — except the IP allowlist: a job has no client address
        (the request that queued it was checked). `key_id` "" is anonymous;
        `count` False checks the key without taking from its rate limit."""
        record = self._ring.record_of(key_id) if key_id else None
        if record is not None and record.expires_at is not None and record.expires_at <= now:
            if self.blocking:
                raise ExpiredApiKey()
            return None
        if record is None:
            if self.blocking:
                raise InvalidApiKey() if key_id else MissingApiKey()
            return None
        if count and record.rate_limit is not None and self._limiter is not None:
            allowed, retry_after = await self._limiter.acquire(record.bucket, record.rate_limit, now)
            if not allowed:
                limited = RateLimited(headers={"Retry-After": str(retry_after)})
                limited.key = record
                raise limited
        return record

    @staticmethod
    def check_model(key: KeyRecord | None, name: str, *, known: bool) -> None:
        """404 for an unknown name (whoever asks), 403 outside the allowlist."""
        if not known:
            raise ModelNotFound(f"The model '{name}' does not exist.", param="model")
        if key is not None and key.allowed_models and name not in key.allowed_models:
            raise ModelNotAllowed(
                f"This API key is not allowed to use the model '{name}'.", param="model"
            )

    @staticmethod
    def visible(key: KeyRecord | None, names: Iterable[str]) -> list[str]:
        """The names a key may see in /v1/models, in the given order."""
        if key is None or not key.allowed_models:
            return list(names)
        allowed = key.allowed_models
        return [n for n in names if n in allowed]


def check_model(key: KeyRecord | None, name: str, *, known: bool) -> None:
    KeyGate.check_model(key, name, known=known)


def visible(key: KeyRecord | None, names: Iterable[str]) -> list[str]:
    return KeyGate.visible(key, names)


def gate_for(snap: Snapshot, previous: object | None) -> KeyGate:
    """The gate of a routing snapshot (the router's key-gate factory, see
    router.extensions). The rate limiter of the gate it replaces is kept,
    with its windows, unless the snapshot changed the limiter scope."""
    limiter = previous.limiter if isinstance(previous, KeyGate) else None
    return KeyGate(snap.keyring, cast(Mode, snap.api_keys_mode), limiter_for(snap.rate_limit_scope, limiter))
