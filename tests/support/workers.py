"""Each test worker of a parallel run (`pytest -n N`) its own namespace.

Loaded as a plugin (`-p tests.support.workers` in pytest.ini) so that it runs
before pytest-django reads the settings. In a worker (pytest-xdist sets
PYTEST_XDIST_WORKER before the worker's config is parsed) the test process
gets its own Redis key prefix (and so its own Celery queue and notice
channel) and its own var dir, instead of the ones every worker would derive
from the same checkout. Both are taken back out of the environment once the
settings are read: a router or node a test starts picks its own, as in a
serial run. The processes a test starts already get their own prefix, var
dir, database and ports (routerproc.RouterProc, nodeproc.NodeProc,
routerproc.free_port).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_OWN: dict[str, str] = {}
if _WORKER:
    _OWN = {
        "ROUTER_REDIS_PREFIX": f"test:{_WORKER}:{uuid.uuid4().hex[:8]}:",
        "ROUTER_VAR_DIR": tempfile.mkdtemp(prefix=f"router-test-{_WORKER}-"),
    }
    for name, value in _OWN.items():
        os.environ.setdefault(name, value)


def pytest_configure(config) -> None:
    for name, value in _OWN.items():
        if os.environ.get(name) == value:
            del os.environ[name]


def pytest_unconfigure(config) -> None:
    if not _OWN:
        return
    from tests.support.redisns import drop_prefix

    drop_prefix(_OWN["ROUTER_REDIS_PREFIX"])
    shutil.rmtree(_OWN["ROUTER_VAR_DIR"], ignore_errors=True)
