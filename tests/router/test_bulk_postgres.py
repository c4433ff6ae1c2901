"""The router's own SQL on a real PostgreSQL: router.bulk's writes (multi-row
INSERTs and COPY there) and the refresh's plain-SQL reads (jsonb, BIGINT).
Runs test_bulk.py's, test_mirror_reads.py's and keys' test_changed_reads.py's
tests in a pytest of their own against a throwaway cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.services import OwnedPostgres

ROOT = Path(__file__).resolve().parents[2]


def test_own_sql_on_postgresql(tmp_path):
    pg = OwnedPostgres().start()
    try:
        env = {**os.environ, "DATABASE_URL": pg.url, "ROUTER_VAR_DIR": str(tmp_path)}
        vendor = subprocess.run(
            [sys.executable, "-c", "import django; django.setup(); from django.db import connection; "
             "print(connection.vendor)"],
            cwd=ROOT, env={**env, "DJANGO_SETTINGS_MODULE": "config.settings"}, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert vendor.stdout.strip() == "postgresql", vendor.stderr[-2000:]  # what the run below uses
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
             "tests/router/test_bulk.py", "tests/router/test_mirror_reads.py", "tests/keys/test_changed_reads.py"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    finally:
        pg.cleanup()
