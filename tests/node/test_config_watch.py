"""The one YAML writer (node/config_watch.py, run by the tasks process):
applies an edited file once, keeps the old state on a refused edit and
leaves the refusal where every web process can report it."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from django.db import OperationalError

from node import config_watch
from router.models import Backend, ConfigDocument
from router.redis import sync_client
from router.revision import config_error_key, current_revision

ONE = "backends:\n  - {name: a, url: 'http://h:1', models: [m]}\n"
TWO = ONE + "  - {name: b, url: 'http://h:2', models: [two]}\n"
BAD = "backends:\n  - {name: a, url: 'http://h:1', models: [m], wieght: 2}\n"


@pytest.fixture
def yaml_file(db, tmp_path, settings):
    yield from _yaml_file(tmp_path, settings)


@pytest.fixture
def yaml_file_tx(transactional_db, tmp_path, settings):
    """For a test whose writes come from another thread (its own connection)."""
    yield from _yaml_file(tmp_path, settings)


def _yaml_file(tmp_path, settings):
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


def test_the_watcher_thread_applies_a_replaced_and_an_in_place_edit(yaml_file_tx, settings):
    """The tasks process's quick watcher: a file renamed over the path (a new
    inode) and one rewritten in place are both applied, without the beat."""
    yaml_file = yaml_file_tx
    settings.ROUTER_CONFIG_POLL_SECONDS = 0.02
    config_watch.sync_file()
    thread = config_watch.start_watcher()
    assert thread is not None and thread.is_alive()
    assert config_watch.start_watcher() is None  # once per process
    try:
        tmp = yaml_file.with_suffix(".tmp")
        tmp.write_text(TWO)
        os.replace(tmp, yaml_file)
        _wait(lambda: _names() == {"a", "b"})
        yaml_file.write_text(ONE.replace("name: a", "name: c"))  # in place: the same inode
        _wait(lambda: _names() == {"c"})
        assert config_watch.sync_config() is False  # the beat leaves it to the thread
    finally:
        config_watch.stop_watcher()
    assert not thread.is_alive()


def test_only_a_file_renamed_over_the_path_skips_the_settling_look():
    before = ("/etc/router.yaml", 1, 10, 100)
    assert config_watch._replaced(("/etc/router.yaml", 2, 11, 101), before)
    assert not config_watch._replaced(("/etc/router.yaml", 2, 11, 100), before)  # rewritten in place
    assert not config_watch._replaced(("/other.yaml", 2, 11, 101), before)
    assert not config_watch._replaced(None, before) and not config_watch._replaced(before, None)


def _wait(condition, deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    while not _holds(condition):
        assert time.monotonic() < end, "not applied in time"
        time.sleep(0.02)


def _holds(condition) -> bool:
    """The condition, read again later while the watcher thread's write holds
    the table: the test database is SQLite's shared-cache memory database,
    where a read beside another connection's write fails at once ("database
    table is locked") instead of waiting."""
    try:
        return condition()
    except OperationalError as exc:
        if "locked" not in str(exc):
            raise
        return False
