"""Processes that sync the same new file at once parse it once (issue 13):
both web processes and the tasks process sync the YAML at start, and at
20,000 backends each parse is seconds of CPU on the same two cores.

Real Redis (the lock) and the real DB; the parse is counted, not replaced.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from router import services
from router.models import Backend, Source
from router.redis import sync_client
from router.services import config_sync

pytestmark = pytest.mark.django_db(transaction=True)


def fleet(n: int) -> str:
    lines = ["backends:"] + [f"  - {{name: p{i}, url: 'http://h:{i + 1}', models: [m]}}" for i in range(n)]
    return "\n".join([*lines, "health:", "  enabled: false", ""])


def test_a_sync_waits_for_another_process_parsing_the_same_bytes_and_does_not_parse(
    tmp_path, settings, monkeypatch
):
    settings.ROUTER_REDIS_PREFIX = f"t{uuid.uuid4().hex[:10]}:"
    path = tmp_path / "router.yaml"
    path.write_text(fleet(5))
    parses: list[str] = []
    real = services._parse_read
    monkeypatch.setattr(services, "_parse_read", lambda *a, **kw: parses.append(threading.current_thread().name)
                        or real(*a, **kw))
    digest = services.hashlib.sha256(services._MIRROR_FORMAT + path.read_bytes()).hexdigest()
    # Another process is parsing these very bytes: it holds their lock.
    other = sync_client().lock(f"{settings.ROUTER_REDIS_PREFIX}config:parsing:{digest}", timeout=30)
    assert other.acquire(blocking=False)
    out: list[bool] = []
    waiter = threading.Thread(target=lambda: out.append(config_sync(path)), name="waiter")
    waiter.start()
    waiter.join(timeout=1.0)
    assert waiter.is_alive() and parses == []  # it waits instead of parsing beside the other
    # The other process applies the file (as config_sync does under the lock) and lets go.
    assert config_sync(path, force=True) is True
    other.release()
    waiter.join(timeout=30)
    assert not waiter.is_alive() and out == [False]  # applied by the other: nothing to do
    assert parses == ["MainThread"]
    assert Backend.objects.filter(source=Source.CONFIG).count() == 5


def test_a_sync_whose_other_process_failed_parses_itself(tmp_path, settings):
    settings.ROUTER_REDIS_PREFIX = f"t{uuid.uuid4().hex[:10]}:"
    path = tmp_path / "router.yaml"
    path.write_text(fleet(3))
    digest = services.hashlib.sha256(services._MIRROR_FORMAT + path.read_bytes()).hexdigest()
    other = sync_client().lock(f"{settings.ROUTER_REDIS_PREFIX}config:parsing:{digest}", timeout=30)
    assert other.acquire(blocking=False)
    out: list[bool] = []
    waiter = threading.Thread(target=lambda: out.append(config_sync(path)))
    waiter.start()
    waiter.join(timeout=0.5)
    assert waiter.is_alive()
    other.release()  # it let go without applying (its parse failed, or it died)
    waiter.join(timeout=30)
    assert out == [True]
    assert Backend.objects.filter(source=Source.CONFIG).count() == 3
