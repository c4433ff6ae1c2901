"""The one YAML writer (router/config_watch.py, run by the tasks process):
applies an edited file once, keeps the old state on a refused edit and
leaves the refusal where every web process can report it."""

from __future__ import annotations

import uuid

import pytest

from router import config_watch
from router.models import Backend, ConfigDocument
from router.redis import sync_client
from router.revision import config_error_key, current_revision

ONE = "backends:\n  - {name: a, url: 'http://h:1', models: [m]}\n"
TWO = ONE + "  - {name: b, url: 'http://h:2', models: [two]}\n"
BAD = "backends:\n  - {name: a, url: 'http://h:1', models: [m], wieght: 2}\n"


@pytest.fixture
def yaml_file(db, tmp_path, settings):
    path = tmp_path / "router.yaml"
    path.write_text(ONE)
    settings.ROUTER_CONFIG = str(path)
    settings.ROUTER_REDIS_PREFIX = f"t{uuid.uuid4().hex[:10]}:"
    config_watch._seen["stat"] = None
    yield path
    sync_client().delete(config_error_key())
    config_watch._seen["stat"] = None


def _names() -> set[str]:
    return set(Backend.objects.values_list("name", flat=True))


def test_an_unchanged_file_is_not_read_again(yaml_file, monkeypatch):
    assert config_watch.sync_file() is True
    revision = current_revision()
    monkeypatch.setattr(config_watch, "config_sync", lambda path: pytest.fail("re-read an unchanged file"))
    assert config_watch.sync_file() is False
    assert current_revision() == revision


def test_an_edit_is_applied_once(yaml_file):
    config_watch.sync_file()
    yaml_file.write_text(TWO)
    assert config_watch.sync_file() is True
    assert _names() == {"a", "b"}
    revision = current_revision()
    assert config_watch.sync_file(force_read=True) is False  # digest-checked
    assert current_revision() == revision


def test_a_refused_edit_keeps_the_old_state_and_is_shared_until_fixed(yaml_file):
    config_watch.sync_file()
    digest = ConfigDocument.objects.get(pk=1).digest
    yaml_file.write_text(BAD)
    assert config_watch.sync_file() is False
    assert _names() == {"a"} and ConfigDocument.objects.get(pk=1).digest == digest
    assert b"backends[0].wieght: unknown key" in sync_client().get(config_error_key())
    yaml_file.write_text(TWO)
    assert config_watch.sync_file() is True
    assert sync_client().get(config_error_key()) is None


def test_the_beat_task_obeys_router_watch_config(yaml_file, settings):
    settings.ROUTER_WATCH_CONFIG = False
    assert config_watch.sync_config() is False
    assert not ConfigDocument.objects.filter(pk=1).exists()
    settings.ROUTER_WATCH_CONFIG = True
    assert config_watch.sync_config() is True


def test_undoing_a_refused_edit_clears_the_refusal_and_bumps_the_revision(yaml_file):
    """The restored file changes no row, so the writer bumps the revision
    itself: web processes reload and drop the stale last_error."""
    config_watch.sync_file()
    revision = current_revision()
    yaml_file.write_text(BAD)
    assert config_watch.sync_file() is False
    yaml_file.write_text(ONE)
    assert config_watch.sync_file() is True
    assert sync_client().get(config_error_key()) is None
    assert current_revision() == revision + 1
    assert config_watch.sync_file(force_read=True) is False  # nothing pending: no further bump
    assert current_revision() == revision + 1
