"""A drain through the admin API of real router processes (two web
processes of one node, two fake backends, the official openai SDK): new
/v1 traffic leaves the drained backend on every process, a stream already
running on it finishes whole, and after the undrain it is picked again."""

from __future__ import annotations

import re

import httpx
import openai
import pytest

from fakes import openai_backend
from tests.support.routerproc import RouterProc, wait_until

CONFIG = """\
backends:
  - {{name: a, url: '{a}', models: [m]}}
  - {{name: b, url: '{b}', models: [m]}}
health: {{enabled: false}}
"""


@pytest.fixture
def cluster():
    servers = {n: openai_backend.server_thread(n, ["m"]).start() for n in ("a", "b")}
    config = CONFIG.format(a=servers["a"].url, b=servers["b"].url)
    first = RouterProc(config).start()
    second = RouterProc(config, var_dir=first.dir)
    second.prefix = first.prefix
    second.env = {**first.env}
    second.start()
    out = first.manage("createadmintoken", "--name", "drain-e2e")
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip().splitlines()[-1]
    yield servers, (first, second), {"authorization": f"Bearer {token}"}
    second.stop()
    first.stop()
    for server in servers.values():
        server.stop()


def _client(proc: RouterProc) -> openai.OpenAI:
    return openai.OpenAI(base_url=proc.url + "/v1", api_key="unused", max_retries=0, timeout=60)


_AUTHOR = re.compile(r"Hello from (\S+)\.(?:\s|$)")  # the fakes' replies name them (fakes/server.py)


def _served_by(proc: RouterProc) -> str:
    answer = _client(proc).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    found = _AUTHOR.search(answer.choices[0].message.content or "")
    assert found, answer
    return found.group(1)


def _only(proc: RouterProc, name: str, n: int = 6) -> bool:
    """The next `n` requests all go to `name` (two backends of equal weight
    alternate under round robin, so six in a row means the other is out)."""
    return all(_served_by(proc) == name for _ in range(n))


def _listed(proc: RouterProc, auth: dict, name: str) -> dict:
    rows = httpx.get(proc.url + "/api/v1/backends", headers=auth, timeout=30).json()["data"]
    return next(r for r in rows if r["name"] == name)


def test_drain_moves_new_traffic_and_lets_a_running_stream_finish(cluster):
    servers, (first, second), auth = cluster
    for server in servers.values():  # streams that last while the drain goes round
        server.behavior.chunks, server.behavior.chunk_delay_s = 60, 0.25  # 15 s
    stream = _client(first).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
    chunks = iter(stream)
    text = ""
    while not (found := _AUTHOR.search(text)):  # the first few pieces name the backend
        chunk = next(chunks)
        text += (chunk.choices[0].delta.content or "") if chunk.choices else ""
    drained = found.group(1)
    other = "b" if drained == "a" else "a"

    r = httpx.post(f"{first.url}/api/v1/backends/{drained}/drain", headers=auth, timeout=30)
    assert r.status_code == 200 and r.json()["changed"] is True, r.text
    # The stream is still running on the drained backend while the drain is in place.
    wait_until(lambda: (row := _listed(first, auth, drained))["drained"] and row["in_flight"] == 1, 20,
               what="the drained backend listed with its stream in flight")
    for proc in (first, second):
        wait_until(lambda p=proc: _only(p, other), 20, what=f"new requests to leave {drained}")
    status = httpx.get(second.url + "/status", headers=second.status_headers, timeout=30).json()
    assert {b["name"]: b["drained"] for b in status["backends"]} == {drained: True, other: False}

    finish = None
    for chunk in chunks:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "stop" and f"Hello from {drained}" in text, text
    assert _listed(first, auth, drained)["in_flight"] == 0

    for server in servers.values():
        server.behavior.reset()
    back = httpx.post(f"{second.url}/api/v1/backends/{drained}/undrain", headers=auth, timeout=30)
    assert back.status_code == 200 and back.json()["drained"] is False, back.text
    for proc in (first, second):
        wait_until(lambda p=proc: {_served_by(p) for _ in range(6)} == {"a", "b"}, 20,
                   what=f"{drained} to be picked again")
    audit = httpx.get(first.url + "/api/v1/audit", headers=auth, timeout=30).json()["data"]
    assert [e["action"] for e in audit][:2] == ["backend.undrain", "backend.drain"]
