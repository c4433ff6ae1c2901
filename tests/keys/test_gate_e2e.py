"""The key gate end to end (RTR-4, RTR-5, KEY-1/2): the official openai SDK and raw
httpx → a real router process → a fake OpenAI backend, all on loopback.

Most tests share one blocking-mode router that trusts 127.0.0.1 as a proxy, so
X-Forwarded-For decides the client address and IPv4, IPv6 and CIDR allowlists
can be exercised from loopback. Every test issues its own keys with
`manage.py createapikey`, so no test sees another's keys or rate-limit windows.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

import httpx
import openai
import orjson
import pytest

from fakes import openai_backend
from router.redis import sync_client
from tests.keys.e2e import chat, code, create_key, models, sdk
from tests.support.routerproc import RouterProc, wait_until

BLOCKING = """
backends:
  - {{name: a, url: '{url}', models: [m, m-alias, other]}}
health: {{enabled: false}}
api_keys: {{mode: blocking}}
server: {{trusted_proxies: ['127.0.0.1/32']}}
"""


@pytest.fixture(scope="module")
def backend():
    server = openai_backend.server_thread("a", ["m", "m-alias", "other"]).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def router(backend):
    proc = RouterProc(BLOCKING.format(url=backend.url)).start()
    yield proc
    proc.stop()


def xff(address: str) -> dict[str, str]:
    return {"x-forwarded-for": address}


# -- 401 -----------------------------------------------------------------------
def test_missing_key_is_401_missing_api_key(router):
    """No credential at all — or an empty one — is refused on every /v1 route."""
    assert code(chat(router)) == (401, "missing_api_key")
    assert code(models(router)) == (401, "missing_api_key")
    assert code(chat(router, headers={"authorization": "Bearer"})) == (401, "missing_api_key")
    assert code(chat(router, headers={"x-api-key": ""})) == (401, "missing_api_key")
    r = httpx.get(router.url + "/v1/models/m", timeout=30)
    assert code(r) == (401, "missing_api_key")
    assert r.json()["error"]["type"]  # OpenAI-shaped


def test_unknown_key_is_401_invalid_api_key(router):
    client = sdk(router, "sk-not-a-key-this-router-issued")
    with pytest.raises(openai.AuthenticationError) as err:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert err.value.status_code == 401
    assert err.value.body["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError) as err:
        client.models.list()
    assert err.value.body["code"] == "invalid_api_key"


def test_bearer_and_x_api_key_are_both_accepted(router):
    """The key may come as `Authorization: Bearer` (any scheme case) or `x-api-key`."""
    key = create_key(router)
    out = sdk(router, key).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert out.choices[0].message.content
    assert chat(router, headers={"authorization": f"bearer {key}"}).status_code == 200
    assert chat(router, headers={"x-api-key": key}).status_code == 200
    assert models(router, headers={"x-api-key": key}).status_code == 200
    # A bad Bearer does not fall back to a good x-api-key: the Bearer is the credential.
    r = chat(router, headers={"authorization": "Bearer sk-wrong", "x-api-key": key})
    assert code(r) == (401, "invalid_api_key")


def test_key_works_until_its_expiry_then_is_401_expired(router):
    """The boundary is the key's expires_at, checked on every request: 200 before,
    401 expired_api_key from then on, with no reload needed."""
    # Created in one process so the margin is not eaten by interpreter start-up;
    # 6 s, so a loaded machine still sends the first request before it.
    before = router.revision()
    out = router.manage(
        "shell",
        "-c",
        "import datetime as d; from django.utils import timezone as tz; from keys.services import key_create; "
        "k, p = key_create(name='expiring', expires_at=tz.now() + d.timedelta(seconds=6)); "
        "print('EXPIRING', k.expires_at.timestamp(), p)",
    )
    assert out.returncode == 0, out.stderr
    _, expires, key = next(line for line in out.stdout.splitlines() if line.startswith("EXPIRING")).split()
    expires_at = float(expires)
    wait_until(lambda: router.revision() > before, 10, what="the key to reach the router")

    samples: list[tuple[float, float, int, str]] = []

    def expired() -> bool:
        sent = time.time()
        r = chat(router, key)
        samples.append((sent, time.time(), r.status_code, r.json().get("error", {}).get("code", "")))
        return r.status_code != 200

    wait_until(expired, 30, interval=0.05, what="the key to expire")
    assert samples[0][2] == 200, samples[0]  # it worked before the boundary
    for sent, done, status, err in samples:
        if done < expires_at:
            assert status == 200, (sent, done, expires_at)
        if sent >= expires_at:
            assert (status, err) == (401, "expired_api_key")
    last_sent = samples[-1][0]
    assert last_sent < expires_at + 1.0  # refused right after the boundary, not on a later reload
    # Expired is not the same as unknown: the SDK sees an AuthenticationError with its own code.
    with pytest.raises(openai.AuthenticationError) as err:
        sdk(router, key).models.list()
    assert err.value.body["code"] == "expired_api_key"


def test_createapikey_expiry_in_iso8601_is_honoured(router):
    """`--expires` takes ISO 8601 (UTC when no offset): a future date works."""
    key = create_key(router, "--expires", "2999-01-01T00:00:00")
    assert chat(router, key).status_code == 200
    soon = datetime.fromtimestamp(time.time() + 3600, UTC).isoformat()
    assert chat(router, create_key(router, "--expires", soon)).status_code == 200


def test_revoked_key_is_401_invalid_api_key(router):
    name = "to-revoke"
    key = create_key(router, name=name)
    assert chat(router, key).status_code == 200
    before = router.revision()
    out = router.manage("revokeapikey", "--name", name)
    assert out.returncode == 0, out.stderr
    wait_until(lambda: router.revision() > before, 10, what="revocation")
    with pytest.raises(openai.AuthenticationError) as err:
        sdk(router, key).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert err.value.body["code"] == "invalid_api_key"


# -- 403 client IP ---------------------------------------------------------------
def test_ipv4_allowlist(router):
    """A single IPv4 address: only that client (as X-Forwarded-For from the
    trusted proxy says) gets through; others are 403 ip_not_allowed."""
    key = create_key(router, "--ips", "203.0.113.7")
    assert chat(router, key, headers=xff("203.0.113.7")).status_code == 200
    assert chat(router, key, headers=xff("203.0.113.7:51234")).status_code == 200  # v4:port hop
    assert code(chat(router, key, headers=xff("203.0.113.8"))) == (403, "ip_not_allowed")
    assert code(chat(router, key)) == (403, "ip_not_allowed")  # no XFF: the peer, 127.0.0.1
    assert code(models(router, key, headers=xff("203.0.113.8"))) == (403, "ip_not_allowed")
    with pytest.raises(openai.PermissionDeniedError) as err:
        sdk(router, key, **xff("198.51.100.1")).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
    assert err.value.body["code"] == "ip_not_allowed"


def test_ipv4_cidr_allowlist_and_the_rightmost_untrusted_hop(router):
    key = create_key(router, "--ips", "198.51.100.0/24")
    assert chat(router, key, headers=xff("198.51.100.77")).status_code == 200
    assert code(chat(router, key, headers=xff("198.51.101.1"))) == (403, "ip_not_allowed")
    # Trusted hops (127.0.0.1) are skipped from the right; the first untrusted one is the client.
    assert chat(router, key, headers=xff("198.51.100.5, 127.0.0.1")).status_code == 200
    # A client cannot smuggle an allowed address in front of its real one.
    assert code(chat(router, key, headers=xff("198.51.100.5, 203.0.113.99"))) == (403, "ip_not_allowed")
    # Something that is not an address fails closed.
    assert code(chat(router, key, headers=xff("unknown"))) == (403, "ip_not_allowed")


def test_ipv6_and_mixed_allowlist(router):
    key = create_key(router, "--ips", "2001:db8::/32,192.0.2.1,::1")
    for ok in ("2001:db8:1::5", "[2001:db8::9]:443", "192.0.2.1", "::1", "::ffff:192.0.2.1"):
        assert chat(router, key, headers=xff(ok)).status_code == 200, ok
    for refused in ("2001:db9::1", "192.0.2.2", "::2"):
        assert code(chat(router, key, headers=xff(refused))) == (403, "ip_not_allowed"), refused
    listed = models(router, key, headers=xff("2001:db8::1"))
    assert listed.status_code == 200 and {m["id"] for m in listed.json()["data"]} == {"m", "m-alias", "other"}


@pytest.mark.parametrize("trusted", ["", "server: {trusted_proxies: ['192.0.2.0/24', '2001:db8::/32']}\n"])
def test_forwarded_for_is_ignored_unless_the_peer_is_a_trusted_proxy(openai_backends, router_factory, trusted):
    """Anybody can write X-Forwarded-For: from an untrusted peer the allowlist is
    checked against the TCP peer address, whatever the header claims."""
    (a,) = openai_backends("a", models=("m",))
    proc = router_factory(
        f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\nhealth: {{enabled: false}}\n"
        "api_keys: {mode: blocking}\n" + trusted
    )
    remote_only = create_key(proc, "--ips", "203.0.113.7")
    assert code(chat(proc, remote_only, headers=xff("203.0.113.7"))) == (403, "ip_not_allowed")
    assert code(models(proc, remote_only, headers=xff("203.0.113.7"))) == (403, "ip_not_allowed")
    loopback = create_key(proc, "--ips", "127.0.0.0/8")
    assert chat(proc, loopback, headers=xff("203.0.113.99")).status_code == 200


# -- 429 -------------------------------------------------------------------------
def test_node_rate_limit_is_429_with_retry_after(router):
    """rate_limit requests per 60 s; the next is 429 with Retry-After in whole
    seconds (≥ 1, ≤ the window), on every /v1 route; other keys are unaffected."""
    key = create_key(router, "--rate-limit", "3")
    other = create_key(router, "--rate-limit", "3")
    for _ in range(3):
        assert chat(router, key).status_code == 200
    r = chat(router, key)
    assert code(r) == (429, "rate_limit_exceeded")
    retry_after = r.headers["retry-after"]
    assert retry_after.isdigit() and 1 <= int(retry_after) <= 60
    with pytest.raises(openai.RateLimitError) as err:
        sdk(router, key).models.list()
    assert err.value.body["code"] == "rate_limit_exceeded"
    assert 1 <= int(err.value.response.headers["retry-after"]) <= 60
    assert chat(router, other).status_code == 200  # one bucket per key


# -- models: 403 vs 404, visibility ----------------------------------------------
def test_model_allowlist_403_vs_unknown_404(router):
    key = create_key(router, "--models", "m")
    client = sdk(router, key)
    assert client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}]).choices
    with pytest.raises(openai.PermissionDeniedError) as err:
        client.chat.completions.create(model="m-alias", messages=[{"role": "user", "content": "x"}])
    assert err.value.body["code"] == "model_not_allowed"
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    assert err.value.body["code"] == "model_not_found"
    # Unknown is 404 for everybody: whether a key may use it is never the question.
    assert code(chat(router, create_key(router), model="no-such-model")) == (404, "model_not_found")


def test_models_list_is_filtered_and_aliases_are_gated_independently(router):
    """Allowing `m` does not allow its alias `m-alias` (same backend), and the
    reverse: each name is listed and usable only if listed itself."""
    only_m = create_key(router, "--models", "m")
    assert [m.id for m in sdk(router, only_m).models.list()] == ["m"]
    assert sdk(router, only_m).models.retrieve("m").id == "m"
    assert code(chat(router, only_m, model="m-alias")) == (403, "model_not_allowed")

    only_alias = create_key(router, "--models", "m-alias,not-published")
    assert [m.id for m in sdk(router, only_alias).models.list()] == ["m-alias"]  # ∩ published names
    assert chat(router, only_alias, model="m-alias").status_code == 200
    assert code(chat(router, only_alias, model="m")) == (403, "model_not_allowed")
    assert code(chat(router, only_alias, model="not-published")) == (404, "model_not_found")
    # Retrieving a name follows the same rules as using it.
    with pytest.raises(openai.PermissionDeniedError) as err:
        sdk(router, only_alias).models.retrieve("m")
    assert err.value.body["code"] == "model_not_allowed"
    with pytest.raises(openai.NotFoundError):
        sdk(router, only_alias).models.retrieve("not-published")


def test_empty_allowlist_means_every_model(router):
    key = create_key(router)
    assert {m.id for m in sdk(router, key).models.list()} == {"m", "m-alias", "other"}
    for name in ("m", "m-alias", "other"):
        assert chat(router, key, model=name).status_code == 200, name


# -- open mode -------------------------------------------------------------------
def test_open_mode_needs_no_key_and_ignores_placeholders(openai_backends, router_factory):
    """Open mode: no key, or a placeholder such as the SDKs force ("EMPTY",
    "sk-dummy"), is served anonymously, and so is a revoked key (keys/gate.py).
    A currently valid key is still applied in full (models, IPs, rate limit)."""
    (a,) = openai_backends("a", models=("m", "m-alias"))
    proc = router_factory(
        f"backends:\n  - {{name: a, url: '{a.url}', models: [m, m-alias]}}\nhealth: {{enabled: false}}\n"
        "api_keys: {mode: open}\n"
    )
    assert chat(proc).status_code == 200
    for placeholder in ("EMPTY", "sk-dummy"):
        out = sdk(proc, placeholder).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert out.choices[0].message.content
        assert {m.id for m in sdk(proc, placeholder).models.list()} == {"m", "m-alias"}
    assert code(chat(proc, model="nope")) == (404, "model_not_found")

    scoped = create_key(proc, "--models", "m", name="scoped")
    assert [m.id for m in sdk(proc, scoped).models.list()] == ["m"]
    assert code(chat(proc, scoped, model="m-alias")) == (403, "model_not_allowed")
    limited = create_key(proc, "--rate-limit", "2")
    assert [chat(proc, limited).status_code for _ in range(2)] == [200, 200]
    r = chat(proc, limited)
    assert code(r) == (429, "rate_limit_exceeded") and int(r.headers["retry-after"]) >= 1
    pinned = create_key(proc, "--ips", "203.0.113.7")
    assert code(chat(proc, pinned)) == (403, "ip_not_allowed")

    before = proc.revision()
    assert proc.manage("revokeapikey", "--name", "scoped").returncode == 0
    wait_until(lambda: proc.revision() > before, 10, what="revocation")
    assert chat(proc, scoped, model="m-alias").status_code == 200  # now just anonymous


def test_refused_requests_name_their_key_in_the_observation(router):
    """A 429 (rate limit) and a 403 (client IP) are refusals of an identified
    key: the Requests page row names it, as an admitted request's row does."""
    limited, fenced = f"limited-{uuid.uuid4().hex[:6]}", f"fenced-{uuid.uuid4().hex[:6]}"
    key = create_key(router, "--rate-limit", "1", name=limited)
    assert chat(router, key).status_code == 200
    assert code(chat(router, key)) == (429, "rate_limit_exceeded")
    ip_key = create_key(router, "--ips", "203.0.113.7", name=fenced)
    assert code(chat(router, ip_key, headers=xff("203.0.113.8"))) == (403, "ip_not_allowed")

    def rows():
        raw = sync_client().lrange(router.prefix + "recent", 0, -1)
        return [o for o in map(orjson.loads, raw) if o.get("key") in (limited, fenced)]

    wait_until(lambda: len(rows()) == 3, 20, what="the three observations")
    seen = sorted((o["key"], o["status"]) for o in rows())
    assert seen == sorted([(limited, 200), (limited, 429), (fenced, 403)])
    for o in rows():
        assert o["key_source"] == "operator" and o["key_id"].startswith("operator:")
    assert len({o["key_id"] for o in rows()}) == 2
