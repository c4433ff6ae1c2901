"""Switching AppProxy modes never leaves coordinator state behind: in the
legacy mode (or with no AppProxy section) the tasks process removes every
publication and coordinator key an earlier ROUTER configuration mirrored."""

from __future__ import annotations

import uuid

import pytest

from appproxy import tasks
from appproxy.models import Publication
from keys.coordinator import CoordinatorKey, sync_coordinator_keys
from keys.keyring import hash_key
from keys.models import ApiKey, KeySource
from keys.services import key_create
from router.models import ConfigDocument

pytestmark = pytest.mark.django_db

LEGACY = {
    "enabled": True,
    "coordinator_url": "http://127.0.0.1:1",
    "api_secret": "a" * 40,
    "jwt_secret": "j" * 40,
    "authority": "legacy-1",
    "hostname": "h",
    "wildcard_domain": ".models.test",
}
ROUTER = {
    "enabled": True,
    "coordinator_url": "http://127.0.0.1:1",
    "api_secret": "a" * 40,
    "authority": "router-1",
    "hostname": "h",
}


def _apply(document: dict) -> None:
    ConfigDocument.objects.update_or_create(
        pk=1, defaults={"path": "/x/router.yaml", "digest": uuid.uuid4().hex, "document": document}
    )


def _mirror_router_state() -> None:
    Publication.objects.create(authority="router-1", model="m", aliases=["a"], mappings=[])
    sync_coordinator_keys([CoordinatorKey(key_id="c1", key_hash=hash_key("sk-c1"))], full=True)


@pytest.fixture(autouse=True)
def _fresh_tasks_state(monkeypatch):
    monkeypatch.setattr(tasks, "_cleared_for", tasks._UNSET)
    monkeypatch.setattr(tasks, "_others_cleared_for", tasks._UNSET)
    monkeypatch.setattr(tasks, "clear_mirror", lambda: None)  # circuits: the legacy tests' business


@pytest.mark.parametrize("document", [{"appproxy": LEGACY}, {}], ids=["legacy-mode", "no-appproxy"])
def test_router_state_goes_when_router_mode_is_not_active(document):
    operator, _ = key_create(name="ops")
    _mirror_router_state()
    _apply(document)
    tasks._settings()
    assert not Publication.objects.exists()
    assert not ApiKey.objects.filter(source=KeySource.COORDINATOR).exists()
    assert ApiKey.objects.filter(pk=operator.pk).exists()  # operator keys stay


def test_router_state_stays_in_router_mode():
    _mirror_router_state()
    _apply({"appproxy_router": ROUTER})
    s = tasks._settings()
    assert s is not None and s.mode == "router"
    assert Publication.objects.exists() and ApiKey.objects.filter(source=KeySource.COORDINATOR).exists()
