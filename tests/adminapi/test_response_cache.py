"""`/api/v1/response-cache`: the settings and a bounded count of the shared
entries, and the purge `manage.py purgeresponsecache` does (Redis entries
deleted, the purge published to every web process), refused to read-only
tokens and audited. In-process with real Redis (a prefix per test), and once
against a real router process serving the official openai SDK's requests."""

from __future__ import annotations

import time

import httpx
import pytest
import redis

from adminapi.models import AuditEntry
from fakes import openai_backend
from router.models import ConfigDocument
from router.redis import sync_client
from router.respcache import shared
from router.respcache.key import model_tag
from tests.support.redisns import isolated_prefix
from tests.support.routerproc import RouterProc, wait_until

from .conftest import assert_error

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def prefix(settings):
    yield from isolated_prefix(settings, "admincache")


def seed(model: str, n: int) -> None:
    """n shared entries of `model`, named as the cache names them."""
    client = sync_client()
    for i in range(n):
        client.set(shared.entry_key(model, i.to_bytes(16, "big")), b"0 0\n{}", px=60_000)


def entries(model: str | None = None) -> int:
    pattern = shared.prefix() + (f"{model_tag(model)}:*" if model else "*")
    return len(list(sync_client().scan_iter(match=pattern)))


def test_the_settings_and_the_shared_entries_are_read(api, ro_api):
    """Off by default; the stored document's settings once enabled; the
    count is this deployment's entries only, exact when the scan finished."""
    seed("chat", 3)
    seed("code", 2)
    sync_client().set("test:admincache-elsewhere:respcache:x:y", b"1", px=60_000)  # another deployment's
    got = api("GET", "/response-cache").json()
    assert got == {"enabled": False, "ttl": 300.0, "max_bytes": 64 * 1024 * 1024, "max_entry_bytes": 1024 * 1024,
                   "shared": True, "scope": "key", "deterministic_only": True,
                   "shared_entries": {"count": 5, "complete": True}}
    ConfigDocument.objects.update_or_create(pk=1, defaults={"path": "", "digest": "d" * 64, "document": {
        "response_cache": {"enabled": True, "ttl": 60, "max_bytes": "1MiB", "max_entry_bytes": "64KiB",
                           "scope": "global"}}})
    got = ro_api("GET", "/response-cache").json()  # a read-only token reads
    assert (got["enabled"], got["ttl"], got["max_bytes"], got["max_entry_bytes"], got["scope"]) == (
        True, 60.0, 1024 * 1024, 64 * 1024, "global")
    sync_client().delete("test:admincache-elsewhere:respcache:x:y")


def test_the_count_is_bounded_and_says_when_it_stopped_early(settings):
    """One SCAN of a few keys cannot walk a database of thousands: the count
    is then a lower bound, flagged incomplete; with room it is exact."""
    seed("chat", 1500)
    found, complete = shared.count(scans=1)
    assert not complete and found < 1500
    assert shared.count() == (1500, True)


def test_purge_by_model_then_whole_deletes_publishes_and_audits(api):
    seed("chat", 3)
    seed("code", 2)
    listener = sync_client().pubsub()
    listener.subscribe(shared.purge_channel())
    assert listener.get_message(timeout=5)["type"] == "subscribe"

    def published() -> str:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            message = listener.get_message(timeout=1)
            if message and message["type"] == "message":
                return message["data"].decode()
        raise AssertionError("no purge published")

    r = api("POST", "/response-cache/purge?model=chat")
    assert r.status_code == 200, r.content
    assert r.json() == {"model": "chat", "deleted": 3}
    assert published() == "chat"
    assert entries("chat") == 0 and entries("code") == 2
    r = api("POST", "/response-cache/purge")
    assert r.json() == {"model": None, "deleted": 2} and published() == "" and entries() == 0
    listener.close()
    audit = list(AuditEntry.objects.order_by("pk").values_list("actor", "action", "target", "detail"))
    assert audit == [
        ("token:ops", "response_cache.purge", "model:chat", {"deleted": 3}),
        ("token:ops", "response_cache.purge", "response_cache", {"deleted": 2}),
    ]
    listed = api("GET", "/audit?action=response_cache.").json()
    assert [e["target"] for e in listed["data"]] == ["response_cache", "model:chat"]


def test_a_read_only_token_cannot_purge_and_a_bad_model_is_refused(api, ro_api):
    seed("chat", 2)
    assert_error(ro_api("POST", "/response-cache/purge"), 403, "read_only_token")
    assert_error(api("POST", "/response-cache/purge?model=%20"), 400, "invalid_request")
    assert_error(api("GET", "/response-cache/purge"), 405, "method_not_allowed")
    assert entries("chat") == 2 and not AuditEntry.objects.exists()


def test_redis_down_is_a_503_for_the_purge_and_no_count_for_the_read(api, monkeypatch):
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from router import redis as router_redis

    # Nothing listens on port 1: a real refused connection, no retries.
    broken = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    monkeypatch.setattr(router_redis, "sync_client", lambda: broken)
    monkeypatch.setattr(shared, "sync_client", lambda: broken)
    assert_error(api("POST", "/response-cache/purge"), 503, "redis_unavailable")
    assert not AuditEntry.objects.exists()
    got = api("GET", "/response-cache").json()
    assert got["shared_entries"] == {"count": None, "complete": False}


CONFIG = """
backends:
  - {{name: a, url: '{url}', models: [m, n]}}
health: {{enabled: false}}
response_cache: {{enabled: true}}
"""


def test_a_purge_through_the_api_empties_a_running_routers_memory_tier():
    """A router process (uvicorn, its own database and Redis prefix) holding
    hits for two models: purging one through the API makes its next request
    a miss in that process too (the purge reached its memory tier), the other
    model still hits; the count follows."""
    backend = openai_backend.server_thread("a", ["m", "n"]).start()
    router = RouterProc(CONFIG.format(url=backend.url)).start()
    try:
        out = router.manage("createadmintoken", "--name", "e2e")
        assert out.returncode == 0, out.stderr
        token = out.stdout.strip().splitlines()[-1]
        admin = httpx.Client(base_url=router.url + "/api/v1", headers={"authorization": f"Bearer {token}"}, timeout=30)

        def chat(model: str) -> str:
            body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
            r = httpx.post(router.url + "/v1/chat/completions", json=body, timeout=30)
            assert r.status_code == 200, r.text
            return r.headers["x-cache"]

        for model in ("m", "n"):
            assert chat(model) == "miss"
            wait_until(lambda model=model: chat(model) == "hit", 10, what=f"{model} cached")
        wait_until(lambda: admin.get("/response-cache").json()["shared_entries"]["count"] == 2, 10,
                   what="both entries in Redis")
        got = admin.get("/response-cache").json()
        assert got["enabled"] is True and got["shared_entries"]["complete"] is True
        r = admin.post("/response-cache/purge", params={"model": "m"})
        assert r.status_code == 200 and r.json() == {"model": "m", "deleted": 1}, r.text
        wait_until(lambda: chat("m") == "miss", 10, what="m dropped from the memory tier")
        assert chat("n") == "hit"
        admin.close()
    finally:
        router.stop()
        backend.stop()
