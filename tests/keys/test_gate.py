"""The key gate: every status of seed §9.7, in open and blocking mode."""

from __future__ import annotations

import time

import pytest

from keys.gate import KeyGate, extract_key, gate_for
from keys.keyring import Keyring, hash_key, make_record
from keys.ratelimit import ClusterLimiter, NodeLimiter
from router.core.errors import (
    ClientIpNotAllowed,
    ExpiredApiKey,
    InvalidApiKey,
    MissingApiKey,
    ModelNotAllowed,
    ModelNotFound,
    RateLimited,
)
from router.core.snapshot import Snapshot

NOW = 1_800_000_000.0
GOOD = "sk-good-0000000000000000000000000000000000000"
EXPIRING = "sk-expiring-000000000000000000000000000000000"
NETS = "sk-nets-00000000000000000000000000000000000000"
LIMITED = "sk-limited-00000000000000000000000000000000000"
MODELS = "sk-models-000000000000000000000000000000000000"


def rec(plain, i, **kw):
    return make_record(
        id=f"operator:{i}",
        name=plain[3:8],
        source="operator",
        key_hash=hash_key(plain),
        **kw,
    )


RING = Keyring(
    [
        rec(GOOD, 1),
        rec(EXPIRING, 2, expires_at=NOW),
        rec(
            NETS, 3, allowed_client_ips=["10.1.2.3", "192.168.0.0/16", "2001:db8::/32"]
        ),
        rec(LIMITED, 4, rate_limit=2),
        rec(MODELS, 5, allowed_models=["llama-4-chat", "gpt-4o"]),
    ]
)


def bearer(key, scheme="Bearer"):
    return {"authorization": f"{scheme} {key}"}


@pytest.fixture
def blocking():
    return KeyGate(RING, "blocking", NodeLimiter())


@pytest.fixture
def open_gate():
    return KeyGate(RING, "open", NodeLimiter())


# -- extraction ------------------------------------------------------------
@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"authorization": "Bearer abc"}, "abc"),
        ({"authorization": "bearer abc"}, "abc"),
        ({"authorization": "BEARER   abc  "}, "abc"),
        ({"x-api-key": "abc"}, "abc"),
        ({"authorization": "Bearer abc", "x-api-key": "other"}, "abc"),
        ({"authorization": "Basic dXNlcjpwdw==", "x-api-key": "abc"}, "abc"),
        ({"authorization": "Bearer "}, None),
        ({"authorization": "Bearer"}, None),
        ({"x-api-key": "  "}, None),
        ({}, None),
    ],
)
def test_extract_key(headers, expected):
    """Bearer (scheme in any case) wins over x-api-key; blanks are no key."""
    assert extract_key(headers) == expected


# -- blocking mode -----------------------------------------------------------
async def test_valid_key_by_bearer_and_by_x_api_key(blocking):
    assert (await blocking.admit(bearer(GOOD), "1.2.3.4", NOW)).id == "operator:1"
    assert (
        await blocking.admit(bearer(GOOD, "bearer"), "1.2.3.4", NOW)
    ).id == "operator:1"
    assert (
        await blocking.admit({"x-api-key": GOOD}, "1.2.3.4", NOW)
    ).id == "operator:1"


async def test_missing_key_is_401(blocking):
    with pytest.raises(MissingApiKey) as exc:
        await blocking.admit({}, "1.2.3.4", NOW)
    assert exc.value.status == 401 and exc.value.code == "missing_api_key"


async def test_unknown_key_is_401_and_never_echoed(blocking):
    with pytest.raises(InvalidApiKey) as exc:
        await blocking.admit(bearer("sk-nope"), "1.2.3.4", NOW)
    assert exc.value.status == 401 and exc.value.code == "invalid_api_key"
    assert "sk-nope" not in exc.value.to_body().decode()


async def test_expiry_is_exclusive_at_the_boundary(blocking):
    """A key is valid strictly before expires_at and expired at it."""
    assert await blocking.admit(bearer(EXPIRING), "1.2.3.4", NOW - 0.001)
    with pytest.raises(ExpiredApiKey) as exc:
        await blocking.admit(bearer(EXPIRING), "1.2.3.4", NOW)
    assert exc.value.status == 401 and exc.value.code == "expired_api_key"


@pytest.mark.parametrize(
    "ip",
    ["10.1.2.3", "192.168.44.5", "2001:db8::1", "2001:db8:ffff::9", "::ffff:10.1.2.3"],
)
async def test_ip_inside_the_allowlist_passes(blocking, ip):
    assert await blocking.admit(bearer(NETS), ip, NOW)


@pytest.mark.parametrize(
    "ip", ["10.1.2.4", "172.16.0.1", "2001:db9::1", "::1", "unknown", "garbage"]
)
async def test_ip_outside_the_allowlist_is_403(blocking, ip):
    with pytest.raises(ClientIpNotAllowed) as exc:
        await blocking.admit(bearer(NETS), ip, NOW)
    assert exc.value.status == 403


async def test_a_unix_socket_client_is_not_subject_to_the_allowlist(blocking):
    """"" is a client of the node's Unix socket (it has no address; nothing
    else yields ""): IP rules do not apply to it."""
    assert await blocking.admit(bearer(NETS), "", NOW)


async def test_unparseable_allowlist_denies_everyone():
    ring = Keyring([rec(NETS, 9, allowed_client_ips=["bogus"])])
    gate = KeyGate(ring, "blocking", None)
    with pytest.raises(ClientIpNotAllowed):
        await gate.admit(bearer(NETS), "10.1.2.3", NOW)


async def test_rate_limit_is_429_with_retry_after(blocking):
    await blocking.admit(bearer(LIMITED), "1.2.3.4", NOW)
    await blocking.admit(bearer(LIMITED), "1.2.3.4", NOW + 10)
    with pytest.raises(RateLimited) as exc:
        await blocking.admit(bearer(LIMITED), "1.2.3.4", NOW + 15)
    assert exc.value.status == 429
    assert exc.value.headers == {"Retry-After": "45"}
    assert await blocking.admit(bearer(LIMITED), "1.2.3.4", NOW + 60)


async def test_refused_requests_do_not_count_against_the_rate_limit():
    """A 403 for the wrong address leaves the key's budget untouched."""
    plain = "sk-both-limits"
    ring = Keyring([rec(plain, 7, rate_limit=1, allowed_client_ips=["10.0.0.1"])])
    gate = KeyGate(ring, "blocking", NodeLimiter())
    for _ in range(3):
        with pytest.raises(ClientIpNotAllowed):
            await gate.admit(bearer(plain), "10.0.0.2", NOW)
    assert await gate.admit(bearer(plain), "10.0.0.1", NOW)


async def test_order_expired_before_ip(blocking):
    """An expired key gets 401 even from a forbidden address."""
    ring = Keyring([rec(NETS, 3, expires_at=NOW, allowed_client_ips=["10.0.0.1"])])
    with pytest.raises(ExpiredApiKey):
        await KeyGate(ring, "blocking", None).admit(bearer(NETS), "8.8.8.8", NOW)


async def test_no_keyring_blocks_everything():
    gate = KeyGate(None, "blocking", None)
    with pytest.raises(InvalidApiKey):
        await gate.admit(bearer(GOOD), "1.2.3.4", NOW)


def test_bad_mode_is_rejected():
    with pytest.raises(ValueError, match="open"):
        KeyGate(RING, "strict", None)  # type: ignore[arg-type]


# -- open mode ---------------------------------------------------------------
async def test_open_mode_needs_no_key(open_gate):
    assert await open_gate.admit({}, "1.2.3.4", NOW) is None


async def test_open_mode_ignores_unknown_and_expired_keys(open_gate):
    """Placeholder keys ("EMPTY", as SDKs require one) proceed anonymously."""
    assert await open_gate.admit(bearer("EMPTY"), "1.2.3.4", NOW) is None
    assert await open_gate.admit({"x-api-key": "sk-dummy"}, "1.2.3.4", NOW) is None
    assert await open_gate.admit(bearer(EXPIRING), "1.2.3.4", NOW) is None


async def test_open_mode_applies_a_valid_key(open_gate):
    """A valid key in open mode keeps its IP allowlist, rate limit and models."""
    assert (await open_gate.admit(bearer(GOOD), "1.2.3.4", NOW)).id == "operator:1"
    with pytest.raises(ClientIpNotAllowed):
        await open_gate.admit(bearer(NETS), "8.8.8.8", NOW)
    await open_gate.admit(bearer(LIMITED), "1.2.3.4", NOW)
    await open_gate.admit(bearer(LIMITED), "1.2.3.4", NOW)
    with pytest.raises(RateLimited):
        await open_gate.admit(bearer(LIMITED), "1.2.3.4", NOW)
    key = await open_gate.admit(bearer(MODELS), "1.2.3.4", NOW)
    with pytest.raises(ModelNotAllowed):
        open_gate.check_model(key, "llama-4", known=True)


# -- models ----------------------------------------------------------------
def test_unknown_model_is_404_even_for_a_restricted_key():
    key = RING[hash_key(MODELS)]
    with pytest.raises(ModelNotFound) as exc:
        KeyGate.check_model(key, "nope", known=False)
    assert exc.value.status == 404 and exc.value.code == "model_not_found"
    with pytest.raises(ModelNotFound):
        KeyGate.check_model(None, "nope", known=False)


def test_known_model_outside_the_allowlist_is_403():
    key = RING[hash_key(MODELS)]
    KeyGate.check_model(key, "llama-4-chat", known=True)
    with pytest.raises(ModelNotAllowed) as exc:
        KeyGate.check_model(key, "mistral", known=True)
    assert exc.value.status == 403 and exc.value.code == "model_not_allowed"


def test_empty_allowlist_and_anonymous_allow_every_known_model():
    KeyGate.check_model(RING[hash_key(GOOD)], "anything", known=True)
    KeyGate.check_model(None, "anything", known=True)


def test_aliases_are_gated_independently():
    """Allowing a base name does not allow its alias, and vice versa."""
    key = RING[hash_key(MODELS)]  # allows llama-4-chat (base) and gpt-4o
    with pytest.raises(ModelNotAllowed):
        KeyGate.check_model(key, "llama-4", known=True)  # alias of llama-4-chat
    published = ["gpt-4o", "gpt-4o-latest", "llama-4", "llama-4-chat", "mistral"]
    assert KeyGate.visible(key, published) == ["gpt-4o", "llama-4-chat"]


def test_visibility_empty_allowlist_lists_everything():
    names = ["a", "b"]
    assert KeyGate.visible(RING[hash_key(GOOD)], names) == names
    assert KeyGate.visible(None, names) == names


# -- hot path ----------------------------------------------------------------
async def test_admit_costs_well_under_a_tenth_of_a_millisecond():
    """CPU per admission, rate limit included (generous bound for CI noise)."""
    ring = Keyring([rec(f"sk-k{i:05d}", i, rate_limit=10**9) for i in range(10_000)])
    gate = KeyGate(ring, "blocking", NodeLimiter())
    headers = bearer("sk-k04242")
    n = 5_000
    start = time.process_time()
    for i in range(n):
        await gate.admit(headers, "1.2.3.4", NOW + i * 1e-3)
    per_call = (time.process_time() - start) / n
    assert per_call < 100e-6, f"{per_call * 1e6:.1f} µs per admission"


# -- the gate of a routing snapshot (the router's key-gate factory) ---------
def _snap(**kw):
    return Snapshot(revision=1, backends={}, by_model={}, **kw)


def test_gate_for_applies_the_snapshot_mode_and_keyring():
    gate = gate_for(_snap(api_keys_mode="blocking", keyring=RING), None)
    assert gate.blocking
    assert gate.limiter is not None and gate.limiter.scope == "node"


def test_gate_for_keeps_the_limiter_while_the_scope_is_unchanged():
    first = gate_for(_snap(), None)
    again = gate_for(_snap(api_keys_mode="blocking"), first)
    assert again.limiter is first.limiter


def test_gate_for_switches_the_limiter_when_the_scope_changes(settings):
    node = gate_for(_snap(), None)
    cluster = gate_for(_snap(rate_limit_scope="cluster"), node)
    assert isinstance(cluster.limiter, ClusterLimiter)
    assert cluster.limiter.prefix == settings.ROUTER_REDIS_PREFIX + "ratelimit:"
    back = gate_for(_snap(), cluster)
    assert isinstance(back.limiter, NodeLimiter) and back.limiter is not node.limiter


# -- a queued job run on a key's behalf (batch lines): by record id ----------


async def test_admit_id_runs_a_job_as_the_key_that_queued_it(blocking):
    """The record of the id; its expiry and rate limit apply, not its IP
    allowlist (a job has no client address)."""
    assert (await blocking.admit_id("operator:1", NOW)).id == "operator:1"
    assert (await blocking.admit_id("operator:3", NOW)).id == "operator:3"
    with pytest.raises(ExpiredApiKey):
        await blocking.admit_id("operator:2", NOW)


async def test_admit_id_refuses_a_key_gone_since_or_no_key_when_blocking():
    gate = KeyGate(RING, "blocking", NodeLimiter())
    with pytest.raises(InvalidApiKey):
        await gate.admit_id("operator:99", NOW)
    with pytest.raises(MissingApiKey):
        await gate.admit_id("", NOW)
    opened = KeyGate(RING, "open", NodeLimiter())
    assert await opened.admit_id("operator:99", NOW) is None
    assert await opened.admit_id("", NOW) is None


async def test_admit_id_counts_against_the_rate_limit_unless_told_not_to():
    gate = KeyGate(RING, "blocking", NodeLimiter())
    for _ in range(5):
        assert await gate.admit_id("operator:4", NOW, count=False) is not None
    await gate.admit_id("operator:4", NOW)
    await gate.admit_id("operator:4", NOW)
    with pytest.raises(RateLimited):
        await gate.admit_id("operator:4", NOW)
