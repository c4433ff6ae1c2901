"""router.dbthread on a real PostgreSQL (its own cluster): one thread whose
connection outlives a call, and is replaced once the server dropped it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.services import OwnedPostgres

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import asyncio, os, sys
import django
django.setup()
import psycopg
from django.db import DatabaseError, connection
from router import dbthread
from router.dbthread import DbThread

def pid():
    with connection.cursor() as c:
        c.execute("SELECT pg_backend_pid()")
        return c.fetchone()[0]

def open_transaction():
    from django.db import transaction
    transaction.set_autocommit(False)
    with connection.cursor() as c:
        c.execute("CREATE TABLE left_open (x int)")

def has_table():
    with connection.cursor() as c:
        c.execute("SELECT to_regclass('left_open') IS NOT NULL")
        return c.fetchone()[0]

async def main():
    t = DbThread("test-db")
    first = await t.run(pid)
    print("same", await t.run(pid) == first)
    with psycopg.connect(sys.argv[1], autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (first,))
    try:
        await t.run(pid)
        print("failed-once", False)
    except DatabaseError:
        print("failed-once", True)
    second = await t.run(pid)
    print("replaced", second != first)
    dbthread.IDLE_CHECK_S = 0.0  # a connection idle past the check is tested before use
    with psycopg.connect(sys.argv[1], autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (second,))
    third = await t.run(pid)
    print("checked", third != second)
    await t.run(open_transaction)
    print("not-carried", not await t.run(has_table))
    t.shutdown()

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def pg():
    server = OwnedPostgres().start()
    yield server
    server.cleanup()


def test_a_db_thread_keeps_its_connection_and_replaces_a_dropped_one(pg, tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": pg.url,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "ROUTER_VAR_DIR": str(tmp_path),
    }
    out = subprocess.run([sys.executable, "-c", SCRIPT, pg.url.replace("postgres://", "postgresql://")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split() for line in out.stdout.splitlines() if line.count(" ") == 1)
    assert lines == {"same": "True", "failed-once": "True", "replaced": "True", "checked": "True",
                     "not-carried": "True"}, out.stdout
