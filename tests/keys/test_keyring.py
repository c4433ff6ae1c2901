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
    rec = record(rate_limit=5)
    assert rec.bucket
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
    limited = record(rate_limit=5)
    assert limited.bucket == limiter_bucket(DIGEST) == record(id="other", rate_limit=9).bucket
    assert DIGEST not in limited.bucket
    # A key without a limit needs none (100,000 SHA-256s a compile saved).
    assert record().bucket == "" and record(rate_limit=0).bucket == ""


def test_ip_list_with_no_valid_entry_fails_closed():
    """A set-but-unparseable allowlist restricts the key to nothing."""
    rec = record(allowed_client_ips=["not-an-ip"])
    assert rec.ip_restricted and rec.networks == ()
    assert not record().ip_restricted


def test_zero_rate_limit_means_unlimited():
    assert record(rate_limit=0).rate_limit is None
    assert record(rate_limit=5).rate_limit == 5


# --- replaced(): persistent maps sharing what did not change, equal to a from-scratch build ---

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _rec(ident: int, version: int):
    return make_record(id=f"operator:{ident}", name=f"k{ident}", source="operator",
                       key_hash=hash_key(f"sk-{ident}-{version}"), hint="…")


# A step: the ids a change names, each one revoked (None) or (re)issued at a version.
STEP = st.dictionaries(st.integers(0, 40), st.one_of(st.none(), st.integers(0, 3)), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=60), st.integers(0, 30))
def test_replaced_keyring_equals_a_fresh_build_after_every_change(steps, start):
    """A random run of revocations, issues and rotations: after every change
    the keyring holds exactly what a keyring built from scratch over the
    current keys holds (lookups, length, iteration, the gate's map), and
    every earlier keyring still holds what it held."""
    _run(steps, start)


def _run(steps, start):
    current = {i: _rec(i, 0) for i in range(start)}
    ring = Keyring(current.values())
    history = []
    for step in steps:
        ids = [f"operator:{i}" for i in step]
        records = []
        for i, version in step.items():
            if version is None:
                current.pop(i, None)
            else:
                current[i] = _rec(i, version)
                records.append(current[i])
        history.append((ring, dict(ring.items())))
        ring = ring.replaced(ids, records)
        scratch = Keyring(current.values())
        assert dict(ring.items()) == dict(scratch.items())
        assert len(ring) == len(scratch) == len(list(ring))
        by_hash = ring.by_hash()
        for i in range(41):
            for version in range(4):
                digest = hash_key(f"sk-{i}-{version}")
                want = scratch.get(digest)
                got = by_hash.get(digest)
                assert got == want and ring.get(digest) == want and (digest in ring) == (want is not None)
    for old, held in history:
        assert dict(old.items()) == held


def test_a_rotation_or_a_digest_taken_over_leaves_no_stale_entry():
    """A record whose id already held another digest drops it, even when the
    change did not name the id; a digest another id held moves with it."""
    a0, b0 = _rec(1, 0), _rec(2, 0)
    ring = Keyring([a0, b0])
    rotated = ring.replaced([], [_rec(1, 1)])
    assert set(rotated) == {_rec(1, 1).key_hash, b0.key_hash} and len(rotated) == 2
    taken = ring.replaced([], [a0._replace(id="operator:3", name="k3")])  # id 3 now presents a's digest
    assert taken[a0.key_hash].id == "operator:3" and len(taken) == 2
    assert taken.replaced(["operator:3"], []).get(a0.key_hash) is None  # and revoking it removes it
    assert set(ring) == {a0.key_hash, b0.key_hash}  # the first keyring is as it was
