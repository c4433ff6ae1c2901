"""Pure keyring: hashing, hints, records that never print their hash."""

from __future__ import annotations

import hashlib

from keys.keyring import Keyring, hash_key, limiter_bucket, make_record, mask_key

PLAIN = "sk-" + "A" * 40 + "a1b2"
DIGEST = hashlib.sha256(PLAIN.encode()).hexdigest()


def record(**kw):
    base = {
        "id": "operator:1",
        "name": "ci",
        "source": "operator",
        "key_hash": DIGEST,
        "hint": "sk-…a1b2",
    }
    base.update(kw)
    return make_record(**base)


def test_hash_key_is_sha256_hex():
    """The stored form of a key is its SHA-256 hex digest."""
    assert hash_key(PLAIN) == DIGEST
    assert len(hash_key("x")) == 64


def test_mask_key_shows_prefix_and_last_four_only():
    assert mask_key(PLAIN) == "sk-…a1b2"
    assert mask_key("abcdef123456") == "…3456"


def test_record_repr_and_str_never_contain_hash():
    """repr/str of a record show no digest and no rate-limit bucket."""
    rec = record()
    for text in (repr(rec), str(rec)):
        assert DIGEST not in text
        assert rec.bucket not in text
        assert PLAIN not in text
        assert "ci" in text


def test_keyring_lookup_by_plaintext():
    rec = record()
    ring = Keyring([rec])
    assert ring.lookup(PLAIN) is rec
    assert ring.lookup(PLAIN + "x") is None
    assert ring[DIGEST] is rec and len(ring) == 1
    assert DIGEST not in repr(ring)


def test_bucket_is_stable_and_not_the_hash():
    """Every node derives the same limiter bucket for a key, without the hash."""
    assert record().bucket == limiter_bucket(DIGEST) == record(id="other").bucket
    assert DIGEST not in record().bucket


def test_ip_list_with_no_valid_entry_fails_closed():
    """A set-but-unparseable allowlist restricts the key to nothing."""
    rec = record(allowed_client_ips=["not-an-ip"])
    assert rec.ip_restricted and rec.networks == ()
    assert not record().ip_restricted


def test_zero_rate_limit_means_unlimited():
    assert record(rate_limit=0).rate_limit is None
    assert record(rate_limit=5).rate_limit == 5
