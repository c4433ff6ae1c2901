"""Routers on one Redis get their own namespace by default (per database)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid

from tests.support.routerproc import PY, ROOT, wait_until

_SHOW = ("from django.conf import settings as s; import json; "
         "print(json.dumps([s.ROUTER_REDIS_PREFIX, s.CELERY_TASK_DEFAULT_QUEUE]))")


def _namespace(tmp, **env) -> list[str]:
    base = {k: v for k, v in os.environ.items() if k != "ROUTER_REDIS_PREFIX"}
    base.update({"ROUTER_VAR_DIR": str(tmp), "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}", **env})
    out = subprocess.run([PY, "manage.py", "shell", "-c", _SHOW], cwd=ROOT, env=base, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_default_prefix_and_queue_differ_per_database_and_are_stable(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    first, second = _namespace(a), _namespace(b)
    assert first[0] != second[0] and first[1] != second[1]
    assert first[0].startswith("router:") and first[1] == first[0] + "tasks"
    assert _namespace(a) == first  # stable across restarts


def test_an_explicit_prefix_wins(tmp_path):
    assert _namespace(tmp_path, ROUTER_REDIS_PREFIX="mine:") == ["mine:", "mine:tasks"]


def test_status_shows_the_namespace(node_factory):
    node = node_factory(args=("--no-tasks",)).start()
    ns = node.status()["node"]["namespace"]
    assert ns["redis_prefix"] == f"router:{ns['deployment']}:" and ns["shared_with"] == []


def test_two_deployments_on_one_prefix_are_warned_about(node_factory):
    """Two routers with distinct databases, one explicit prefix: both warn."""
    prefix = {"ROUTER_REDIS_PREFIX": f"t{uuid.uuid4().hex[:10]}:"}
    first = node_factory(env=prefix, args=("--no-tasks",)).start()
    second = node_factory(env=prefix, args=("--no-tasks",)).start()
    for node, other in ((first, second), (second, first)):
        wait_until(lambda n=node: "another router (deployment" in n.logs(), 30, interval=0.2,
                   what="keyspace warning")
        shared = wait_until(lambda n=node: n.node()["namespace"]["shared_with"], 30, interval=0.2,
                            what="shared_with")
        assert shared == [other.node()["namespace"]["deployment"]]
        assert "keyspace" in node.node()["degraded"]
