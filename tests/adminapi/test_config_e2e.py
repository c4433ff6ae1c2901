"""The config through the admin API of real router processes: a write and a
rollback change what /v1 routes, on the process that took the call and on
another one sharing the database and the file; of two PATCHes based on the
same version, sent to two processes at once, exactly one wins."""

from __future__ import annotations

import threading

import httpx
import pytest

from fakes import openai_backend
from tests.keys.e2e import chat
from tests.support.routerproc import RouterProc, wait_until

CONFIG = """\
backends:
  - {{name: a, url: '{url}', models: [m1]}}
health: {{enabled: false}}
"""


@pytest.fixture(scope="module")
def backend():
    server = openai_backend.server_thread("a", ["m1", "m2"]).start()
    yield server
    server.stop()


@pytest.fixture
def pair(backend):
    """Two web processes of one node: one DB, one config file, one Redis prefix."""
    first = RouterProc(CONFIG.format(url=backend.url)).start()
    second = RouterProc(CONFIG.format(url=backend.url), var_dir=first.dir)
    second.prefix = first.prefix
    second.env = {**first.env}
    second.start()
    out = first.manage("createadmintoken", "--name", "e2e")
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip().splitlines()[-1]
    yield first, second, {"authorization": f"Bearer {token}"}
    second.stop()
    first.stop()


def _routes(proc: RouterProc, model: str) -> bool:
    return chat(proc, model=model).status_code == 200


def _unknown(proc: RouterProc, model: str) -> bool:
    return chat(proc, model=model).status_code == 404


def test_a_write_and_a_rollback_change_routing_on_every_process(pair, backend):
    first, second, auth = pair
    url = first.url + "/api/v1/config"
    assert httpx.get(url, headers=auth).json()["version"] == 1
    r = httpx.patch(url, headers=auth, json={"backends": [{"name": "a", "url": backend.url, "models": ["m2"]}]})
    assert r.status_code == 200, r.text
    assert r.json()["version"] == 2
    for proc in (first, second):
        wait_until(lambda p=proc: _routes(p, "m2") and _unknown(p, "m1"), 15, what="the new config to route")
    back = httpx.post(url + "/versions/1/rollback", headers={**auth, "if-match": '"2"'})
    assert back.status_code == 200 and back.json()["version"] == 3, back.text
    for proc in (first, second):
        wait_until(lambda p=proc: _routes(p, "m1") and _unknown(p, "m2"), 15, what="the rollback to route")
    assert "m2" not in first.config_path.read_text()
    for proc in (first, second):
        assert auth["authorization"][7:] not in proc.logs()


def test_concurrent_patches_on_one_version_exactly_one_wins(pair, backend):
    first, second, auth = pair
    answers: list[httpx.Response] = []
    start = threading.Barrier(2)

    def patch(proc: RouterProc, attempts: int) -> None:
        start.wait()
        answers.append(httpx.patch(proc.url + "/api/v1/config", headers={**auth, "if-match": '"1"'},
                                   json={"retry": {"max_attempts": attempts}}, timeout=60))  # fmt: skip

    threads = [threading.Thread(target=patch, args=(p, n)) for p, n in ((first, 2), (second, 3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert sorted(a.status_code for a in answers) == [200, 409], [a.text for a in answers]
    lost = next(a for a in answers if a.status_code == 409).json()["error"]
    assert lost["code"] == "version_conflict" and lost["current_version"] == 2
    versions = httpx.get(first.url + "/api/v1/config/versions", headers=auth).json()["data"]
    assert [v["number"] for v in versions] == [2, 1]
