"""`/api/v1/prefix-index` in-process (Django test client, real DB, real
Redis): the policy as the stored config says, each web process's index from
the cluster records, and the purge published to every subscriber (a real
Redis subscription stands in for the web processes here; the e2e test below
has real ones), refused to read-only tokens and audited."""

from __future__ import annotations

import time

import pytest

from adminapi.models import AuditEntry
from router import cluster, prefix_purge
from router.models import Backend, ConfigDocument
from router.redis import sync_client
from tests.support.redisns import isolated_prefix

from .conftest import assert_error

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def prefix(settings):
    yield from isolated_prefix(settings, "adminprefix")


def _record(pid: int, index: dict | None) -> dict:
    now = time.time()
    return {"role": "web", "node": "n1", "pid": pid, "host": "h", "revision": 3, "revision_at": now,
            "heartbeat": now, "prefix_index": index}  # fmt: skip


def test_the_policy_and_every_processs_index(api, ro_api):
    ConfigDocument.objects.update_or_create(pk=1, defaults={"path": "", "digest": "d" * 64, "document": {
        "selection_strategy": "cache_aware", "cache_aware": {"block_chars": 64, "max_entries": 4096}}})
    cluster.publish_sync(_record(11, {"entries": 10, "max_entries": 4096, "replicas": 2}))
    cluster.publish_sync(_record(12, None))  # a process still on another strategy
    cluster.publish_sync({**_record(13, None), "role": "tasks"})  # not a web process
    got = ro_api("GET", "/prefix-index").json()
    assert got == {"strategy": "cache_aware", "enabled": True, "block_chars": 64, "min_match": 0.5,
                   "max_entries": 4096, "max_prompt_chars": 65536, "processes": [
                       {"id": "n1/11", "revision": 3, "entries": 10, "max_entries": 4096, "replicas": 2,
                        "approx_bytes": 1280},
                       {"id": "n1/12", "revision": 3, "entries": None, "max_entries": None, "replicas": None,
                        "approx_bytes": None}]}  # fmt: skip


def test_a_purge_reaches_every_subscriber_and_is_audited(api, ro_api):
    Backend.objects.create(name="a", url="http://127.0.0.1:9", models=["m"])
    listener = sync_client().pubsub(ignore_subscribe_messages=True)
    listener.subscribe(prefix_purge.purge_channel())
    try:
        r = api("POST", "/prefix-index/purge")
        assert r.status_code == 200 and r.json() == {"backend": None, "processes": 1}, r.content
        r = api("POST", "/prefix-index/purge?backend=a")
        assert r.json() == {"backend": "a", "processes": 1}
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            message = listener.get_message(timeout=1.0)
            if message is not None:
                got.append(message["data"])
        assert got == [b"", b"a"]
    finally:
        listener.close()
    assert_error(api("POST", "/prefix-index/purge?backend=nope"), 404, "not_found")
    assert_error(api("POST", "/prefix-index/purge?backend="), 400, "invalid_request")
    assert_error(ro_api("POST", "/prefix-index/purge"), 403, "read_only_token")
    entries = list(AuditEntry.objects.order_by("id").values_list("action", "target", "detail"))
    assert entries == [("prefix_index.purge", "prefix_index", {"processes": 1}),
                       ("prefix_index.purge", "backend:a", {"processes": 1})]
