"""No Redis is loud once, visible in /readyz and /status, and heals by itself."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import httpx
import pytest
import redis

from tests.support.routerproc import PY, ROOT, free_port, wait_until
from tests.support.services import OwnedRedis

CONFIG = """
backends:
  - name: b1
    url: http://127.0.0.1:9
    models: [m]
"""

@pytest.fixture
def own_redis():
    server = OwnedRedis().start()
    yield server
    server.cleanup()


def _count(text: str, needle: str) -> int:
    return text.count(needle)


def test_redis_down_at_start_is_logged_once_and_shown(router_factory):
    """A closed REDIS_URL: /v1 serves from the snapshot, /readyz stays 200 with
    `node.redis.ok = false`, and the log says so once, not per retry."""
    router = router_factory(CONFIG, env={"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"})
    node = wait_until(lambda: (n := router.status()["node"]) and not n["redis"]["ok"] and n, 30,
                      what="redis reported down")
    assert "redis" in node["degraded"] and "ConnectionError" in node["redis"]["error"]
    ready = httpx.get(router.url + "/readyz", timeout=5)
    assert ready.status_code == 200 and "redis" in ready.json()["degraded"]
    assert httpx.get(router.url + "/v1/models", timeout=5).status_code == 200
    assert router.status()["node"]["redis"]["ok"] is False
    # The listener retries with a backoff up to 5 s; after several retries one line.
    wait_until(lambda: _count(router.logs(), "Redis unavailable") == 1, 10, what="one warning")
    time.sleep(6)  # bounded negative check: the listener retries (0.2 s doubling to 5 s) meanwhile
    assert _count(router.logs(), "Redis unavailable") == 1
    assert "Traceback" not in router.logs()


def test_a_real_redis_restart_is_reported_and_recovered(router_factory, own_redis):
    router = router_factory(CONFIG, env={"REDIS_URL": own_redis.url})
    wait_until(lambda: router.status()["node"]["redis"]["ok"], 20, what="redis ok")
    own_redis.stop()
    wait_until(lambda: "Redis unavailable" in router.logs(), 30, what="outage logged")
    assert router.status()["node"]["redis"]["ok"] is False
    assert "redis" in httpx.get(router.url + "/readyz", timeout=5).json()["degraded"]
    assert httpx.get(router.url + "/v1/models", timeout=5).status_code == 200
    own_redis.start()
    wait_until(lambda: router.status()["node"]["redis"]["ok"], 30, what="redis recovered")
    logs = router.logs()
    assert _count(logs, "Redis unavailable") == 1 and _count(logs, "Redis reachable again") == 1


def test_beat_without_its_broker_warns_once_instead_of_a_trace_per_task(own_redis, tmp_path):
    env = {**os.environ, "REDIS_URL": own_redis.url, "ROUTER_VAR_DIR": str(tmp_path),
           "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}
    log_path = tmp_path / "beat.log"
    beat = subprocess.Popen([PY, "-m", "celery", "-A", "config", "beat", "--loglevel", "WARNING",
                             "--schedule", str(tmp_path / "schedule")], cwd=ROOT, env=env,
                            stdout=log_path.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: own_redis.proc is not None and _lock_held(own_redis.port), 30, what="beat lock held")
        own_redis.stop()
        wait_until(lambda: "beat: broker unavailable" in log_path.read_text(), 30, what="one warning")
        time.sleep(4)  # several due tasks (each second) fail meanwhile: bounded negative check
        text = log_path.read_text()
        assert _count(text, "beat: broker unavailable") == 1
        assert "Couldn't apply scheduled task" not in text and "Traceback" not in text
        own_redis.start()
        wait_until(lambda: "broker reachable again" in log_path.read_text(), 30, what="recovery logged")
    finally:
        os.killpg(beat.pid, signal.SIGKILL)
        beat.wait(5)


def _lock_held(port: int) -> bool:
    return bool(redis.Redis(port=port).keys("router:*:beat:*"))
