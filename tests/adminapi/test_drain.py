"""`/api/v1/backends/{name}/drain` and `/undrain` in-process (Django test
client, real DB, real Redis, a real YAML file applied by the real sync):
the flag goes through the one writer path (row, change log, revision) into
the snapshot, survives a reload of the YAML, is audited and listed, and the
health probe keeps probing a drained backend."""

from __future__ import annotations

import pytest

from adminapi.models import AuditEntry
from fakes import openai_backend
from router.models import Backend, RoutingChange
from router.revision import current_revision
from router.selectors import compile_snapshot, refresh_snapshot
from router.services import config_sync
from tests.support.redisns import isolated_prefix

from .conftest import assert_error

pytestmark = pytest.mark.django_db

CONFIG = """\
backends:
  - {{name: da, url: '{url}', models: [m1], weight: {weight}}}
  - {{name: db, url: '{url}', models: [m1]}}
health: {{enabled: {health}, interval: 1}}
"""


@pytest.fixture(autouse=True)
def prefix(settings):
    yield from isolated_prefix(settings, "admindrain")


@pytest.fixture
def config_file(tmp_path, settings):
    path = tmp_path / "router.yaml"
    path.write_text(CONFIG.format(url="http://127.0.0.1:9", weight=100, health="false"))
    settings.ROUTER_CONFIG = str(path)
    assert config_sync(path)
    return path


def test_a_drain_is_a_routing_change_every_snapshot_reader_gets(api, config_file):
    """The row, the change log naming the backend and a new revision; a
    snapshot updated in place from the log has the flag, like a compiled one."""
    before_snap = compile_snapshot()
    before = current_revision()
    r = api("POST", "/backends/da/drain")
    assert r.status_code == 200, r.content
    assert r.json() == {"name": "da", "drained": True, "changed": True}
    assert Backend.objects.get(name="da").drained and not Backend.objects.get(name="db").drained
    assert current_revision() == before + 1
    assert list(RoutingChange.objects.filter(revision=before + 1).values_list("topic", "name")) == [("backend", "da")]
    updated = refresh_snapshot(before_snap)
    assert updated.backends["da"].drained and not updated.backends["db"].drained
    assert updated.backends["db"] is before_snap.backends["db"]  # in place: the rest shared
    assert compile_snapshot().backends["da"].drained
    again = api("POST", "/backends/da/drain")  # idempotent: nothing written
    assert again.json()["changed"] is False and current_revision() == before + 1
    listed = {b["name"]: b["drained"] for b in api("GET", "/backends").json()["data"]}
    assert listed == {"da": True, "db": False}
    assert [b["name"] for b in api("GET", "/backends?drained=true").json()["data"]] == ["da"]
    back = api("POST", "/backends/da/undrain")
    assert back.json() == {"name": "da", "drained": False, "changed": True}
    assert not refresh_snapshot(updated).backends["da"].drained
    entries = list(AuditEntry.objects.order_by("id").values_list("actor", "action", "target"))
    assert entries == [("token:ops", "backend.drain", "backend:da"), ("token:ops", "backend.undrain", "backend:da")]


def test_refusals(api, ro_api, config_file):
    """An unknown backend is 404; a read-only token may list but not drain."""
    assert_error(api("POST", "/backends/nope/drain"), 404, "not_found")
    assert_error(ro_api("POST", "/backends/da/drain"), 403, "read_only_token")
    assert_error(api("GET", "/backends/da/drain"), 405, "method_not_allowed")
    assert not Backend.objects.filter(drained=True).exists() and not AuditEntry.objects.exists()


def test_a_drain_survives_a_reload_of_the_yaml(api, config_file):
    """An edit of the drained backend's own entry is applied and the drain
    stays: the sync writes the YAML's columns only."""
    assert api("POST", "/backends/da/drain").status_code == 200
    snap = compile_snapshot()
    config_file.write_text(CONFIG.format(url="http://127.0.0.1:9", weight=7, health="false"))
    assert config_sync(config_file)
    row = Backend.objects.get(name="da")
    assert (row.weight, row.drained) == (7, True)
    updated = refresh_snapshot(snap)
    assert updated.backends["da"].weight == 7 and updated.backends["da"].drained
    assert config_sync(config_file, force=True) is not None  # a forced re-apply (a node's start) too
    assert Backend.objects.get(name="da").drained
    assert config_sync(config_file, incremental=True) is not None  # the tasks process's way: remembers this parse
    config_file.write_text(CONFIG.format(url="http://127.0.0.1:9", weight=9, health="false"))
    assert config_sync(config_file, incremental=True)  # and compares only what the edit touched
    row = Backend.objects.get(name="da")
    assert (row.weight, row.drained) == (9, True)


def test_the_health_probe_keeps_probing_a_drained_backend(api, config_file):
    """The tasks process's probe round covers drained backends, so an
    undrain finds a current verdict."""
    from node import tasks

    server = openai_backend.server_thread("fake", ["m1"]).start()
    try:
        config_file.write_text(CONFIG.format(url=server.url, weight=100, health="true"))
        assert config_sync(config_file)
        assert api("POST", "/backends/da/drain").status_code == 200
        verdicts = tasks.probe_backends()
        assert set(verdicts) >= {"da", "db"}, verdicts
    finally:
        server.stop()
