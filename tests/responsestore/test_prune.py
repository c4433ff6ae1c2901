"""Pruning: the beat's task deletes the stored responses past the retention
(a real database through the ORM), and beat schedules it."""

from __future__ import annotations

import time

import pytest

from config.celery import app
from responsestore import services, tasks
from responsestore.models import StoredResponse
from responsestore.record import Record

DAY = 86400.0


def record(rid: str, age_days: float) -> Record:
    return Record(rid, "operator:1", "k", {"input": "hi"}, [], {"id": rid, "object": "response", "output": []},
                  created_at=time.time() - age_days * DAY)


@pytest.mark.django_db
def test_prune_removes_only_what_is_past_the_retention(settings):
    settings.ROUTER_RESPONSES_RETENTION_DAYS = 30
    services.responses_save([record("resp_old", 31), record("resp_older", 400), record("resp_new", 29)])
    assert tasks.prune() == 2
    assert list(StoredResponse.objects.values_list("id", flat=True)) == ["resp_new"]
    assert tasks.prune() == 0  # idempotent


@pytest.mark.django_db
def test_the_retention_is_configurable(settings):
    services.responses_save([record("resp_hour", 1 / 24), record("resp_minute", 1 / 1440)])
    settings.ROUTER_RESPONSES_RETENTION_DAYS = 0.5 / 24  # half an hour
    assert tasks.prune() == 1
    assert list(StoredResponse.objects.values_list("id", flat=True)) == ["resp_minute"]


@pytest.mark.django_db
def test_each_key_keeps_its_newest_up_to_its_most(settings, monkeypatch):
    """ROUTER_RESPONSES_MAX_PER_KEY: past it a key's oldest go (in batches),
    whatever their age; another key under it keeps all of its own."""
    settings.ROUTER_RESPONSES_MAX_PER_KEY = 3
    monkeypatch.setattr(services, "PRUNE_BATCH", 1)
    heavy = [Record(f"resp_h{i}", "operator:1", "k", {"input": "hi"}, [], {"id": f"resp_h{i}", "output": []},
                    created_at=time.time() - (7 - i) * 60) for i in range(7)]
    light = [Record(f"resp_l{i}", "operator:2", "j", {"input": "hi"}, [], {"id": f"resp_l{i}", "output": []})
             for i in range(2)]
    services.responses_save(heavy + light)
    assert tasks.prune() == 4
    kept = set(StoredResponse.objects.values_list("id", flat=True))
    assert kept == {"resp_h4", "resp_h5", "resp_h6", "resp_l0", "resp_l1"}
    assert tasks.prune() == 0  # idempotent


@pytest.mark.django_db
def test_prune_goes_in_batches(monkeypatch):
    monkeypatch.setattr(services, "PRUNE_BATCH", 3)
    services.responses_save([record(f"resp_{i}", 40) for i in range(7)])
    assert services.responses_prune(retention_s=30 * DAY) == 7
    assert not StoredResponse.objects.exists()


@pytest.mark.django_db
def test_a_response_deleted_before_its_write_is_not_written():
    gone = record("resp_gone", 0)
    gone.deleted = True
    assert services.responses_save([gone, record("resp_kept", 0)]) == 1
    assert list(StoredResponse.objects.values_list("id", flat=True)) == ["resp_kept"]


def test_beat_schedules_the_prune_with_an_expiry():
    entry = app.conf.beat_schedule["responsestore-prune"]
    assert entry["task"] == tasks.prune.name == "responsestore.prune"
    assert 0 < entry["options"]["expires"] <= entry["schedule"]
