"""Concurrent config writes on PostgreSQL, the database a cluster shares:
two web processes on one throwaway PostgreSQL cluster (tests/support/
services.py) take a PATCH each, based on the same version, at the same
moment; the row lock of `router.services.config_write` lets exactly one
win and the other gets 409 with the version that won. SQLite serialises
writers by its file lock (test_config_e2e.py covers that); here the lock is
PostgreSQL's `SELECT … FOR UPDATE`, under its READ COMMITTED isolation.
Skipped when PostgreSQL's server programs are not installed."""

from __future__ import annotations

import threading

import httpx
import pytest

from fakes import openai_backend
from tests.support.routerproc import RouterProc
from tests.support.services import OwnedPostgres

CONFIG = """\
backends:
  - {{name: a, url: '{url}', models: [m1]}}
health: {{enabled: false}}
"""
ROUNDS = 3


@pytest.fixture(scope="module")
def postgres():
    try:
        pg = OwnedPostgres().start()
    except (RuntimeError, OSError) as exc:  # no initdb/pg_ctl here
        pytest.skip(f"PostgreSQL cannot be started here: {exc}")
    yield pg
    pg.cleanup()


@pytest.fixture
def pair(postgres):
    server = openai_backend.server_thread("a", ["m1"]).start()
    env = {"DATABASE_URL": postgres.url}
    first = RouterProc(CONFIG.format(url=server.url), env=env)
    migrated = first.manage("migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    vendor = first.manage("shell", "-c", "from django.db import connection; print(connection.vendor)")
    assert vendor.stdout.strip().splitlines()[-1] == "postgresql", vendor.stderr[-2000:]
    first.start()
    second = RouterProc(CONFIG.format(url=server.url), var_dir=first.dir, env=env)
    second.prefix = first.prefix
    second.env = {**first.env}
    second.start()
    out = first.manage("createadmintoken", "--name", "pg")
    assert out.returncode == 0, out.stderr
    yield first, second, {"authorization": "Bearer " + out.stdout.strip().splitlines()[-1]}
    second.stop()
    first.stop()
    server.stop()


def _race(procs: tuple[RouterProc, RouterProc], auth: dict, version: int, attempts: tuple[int, int]) -> list:
    answers: list[httpx.Response] = []
    start = threading.Barrier(2)

    def patch(proc: RouterProc, n: int) -> None:
        start.wait()
        answers.append(httpx.patch(proc.url + "/api/v1/config", headers={**auth, "if-match": f'"{version}"'},
                                   json={"retry": {"max_attempts": n}}, timeout=60))  # fmt: skip

    threads = [threading.Thread(target=patch, args=(p, n)) for p, n in zip(procs, attempts, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    return answers


def test_of_two_concurrent_patches_on_one_version_exactly_one_wins(pair):
    first, second, auth = pair
    version = httpx.get(first.url + "/api/v1/config", headers=auth, timeout=30).json()["version"]
    for i in range(ROUNDS):
        answers = _race((first, second), auth, version, (2 + 2 * i, 3 + 2 * i))
        assert sorted(a.status_code for a in answers) == [200, 409], [a.text for a in answers]
        won = next(a for a in answers if a.status_code == 200).json()
        lost = next(a for a in answers if a.status_code == 409).json()["error"]
        assert won["version"] == version + 1
        assert lost["code"] == "version_conflict" and lost["current_version"] == version + 1, lost
        version += 1
    got = httpx.get(second.url + "/api/v1/config", headers=auth, timeout=30).json()
    assert got["version"] == version == 1 + ROUNDS
    versions = httpx.get(first.url + "/api/v1/config/versions", headers=auth, timeout=30).json()["data"]
    assert [v["number"] for v in versions] == list(range(version, 0, -1))
    # The file holds the winner of the last round, the same text the last version holds.
    assert f"max_attempts: {got['document']['retry']['max_attempts']}" in first.config_path.read_text()
