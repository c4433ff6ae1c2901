"""Keys made and changed through the admin API reach /v1 of a real router
process (uvicorn, its own SQLite and Redis prefix) the way every key writer's
do: a created key serves, and a disabled, rotated or deleted one is refused."""

from __future__ import annotations

import httpx
import pytest

from fakes import openai_backend
from tests.keys.e2e import chat
from tests.support.routerproc import RouterProc, wait_until

CONFIG = """
backends:
  - {{name: a, url: '{url}', models: [m]}}
health: {{enabled: false}}
api_keys: {{mode: blocking}}
"""


@pytest.fixture(scope="module")
def backend():
    server = openai_backend.server_thread("a", ["m"]).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def router(backend):
    proc = RouterProc(CONFIG.format(url=backend.url)).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def admin(router):
    out = router.manage("createadmintoken", "--name", "e2e")
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip().splitlines()[-1]
    client = httpx.Client(base_url=router.url + "/api/v1", headers={"authorization": f"Bearer {token}"}, timeout=30)
    yield client, token
    client.close()


def _serves(router, key: str) -> bool:
    return chat(router, key).status_code == 200


def _refused(router, key: str) -> bool:
    return chat(router, key).status_code == 401


def test_a_key_made_by_the_api_serves_and_stops_when_disabled_rotated_deleted(router, admin):
    client, token = admin
    made = client.post("/keys", json={"name": "e2e", "allowed_models": ["m"]})
    assert made.status_code == 201, made.text
    key, kid = made.json()["secret"], made.json()["key"]["id"]
    wait_until(lambda: _serves(router, key), 10, what="the new key to serve")

    assert client.patch(f"/keys/{kid}", json={"enabled": False}).status_code == 200
    wait_until(lambda: _refused(router, key), 10, what="the disabled key to be refused")
    assert client.patch(f"/keys/{kid}", json={"enabled": True}).status_code == 200
    wait_until(lambda: _serves(router, key), 10, what="the enabled key to serve again")

    rotated = client.post(f"/keys/{kid}/rotate")
    assert rotated.status_code == 201, rotated.text
    new, new_id = rotated.json()["secret"], rotated.json()["key"]["id"]
    wait_until(lambda: _refused(router, key) and _serves(router, new), 10, what="the rotation to reach /v1")

    assert client.delete(f"/keys/{new_id}").status_code == 204
    wait_until(lambda: _refused(router, new), 10, what="the deleted key to be refused")

    logs = router.logs()
    for secret in (key, new, token):
        assert secret not in logs


def test_backends_are_listed_with_the_answering_process_s_live_state(router, admin, backend):
    client, _ = admin
    chat(router, None)  # whatever the gate answers, the list below is read-only
    listing = client.get("/backends").json()
    assert listing["live"] is True and listing["total"] == 1
    (a,) = listing["data"]
    assert (a["name"], a["source"], a["models"], a["url"]) == ("a", "config", ["m"], backend.url.rstrip("/"))
    assert a["health"] == "healthy" and a["usable"] is True and a["in_flight"] == 0
    assert client.get("/backends?model=nope").json()["total"] == 0
