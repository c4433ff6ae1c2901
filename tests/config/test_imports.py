"""A web process imports what it serves (issue 13, cold start): at 20,000
backends a start is CPU-bound, and Celery (~0.3 s) and Twisted's reactor
(~0.2 s, daphne's Django app) were imported by every process. Celery is for
the tasks process and beat, which load `config.celery` themselves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_web_application_loads_neither_celery_nor_twisted(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "ROUTER_VAR_DIR": str(tmp_path),
           "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}
    code = "import sys, config.asgi; print(sorted({m.split('.')[0] for m in sys.modules} & {'celery', 'twisted', 'daphne'}))"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_celery_finds_the_project_app_in_the_config_package():
    out = subprocess.run([sys.executable, "-c", "from celery.app.utils import find_app; app = find_app('config'); "
                          "print(app.main, app.conf.task_default_queue.endswith('tasks'))"],
                         env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "router True"
