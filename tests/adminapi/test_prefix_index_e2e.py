"""The prefix index's admin on two real web processes routing with
cache_aware: each one's index is listed, and a purge through either reaches
both (over each runtime's own Redis subscription): one backend's prefixes,
then all of them."""

from __future__ import annotations

import httpx
import pytest

from fakes import openai_backend
from tests.support.routerproc import RouterProc, wait_until

CONFIG = """\
backends:
  - {{name: a, url: '{url}', models: [m]}}
selection_strategy: cache_aware
cache_aware: {{block_chars: 16}}
health: {{enabled: false}}
"""


@pytest.fixture
def pair():
    server = openai_backend.server_thread("a", ["m"]).start()
    first = RouterProc(CONFIG.format(url=server.url)).start()
    second = RouterProc(CONFIG.format(url=server.url), var_dir=first.dir)
    second.prefix = first.prefix
    second.env = {**first.env}
    second.start()
    out = first.manage("createadmintoken", "--name", "prefix-e2e")
    assert out.returncode == 0, out.stderr
    yield first, second, {"authorization": "Bearer " + out.stdout.strip().splitlines()[-1]}
    second.stop()
    first.stop()
    server.stop()


def _ask(proc: RouterProc, i: int) -> None:
    prompt = f"conversation {i}: " + "a long shared system prompt, block after block. " * 4
    r = httpx.post(proc.url + "/v1/chat/completions", timeout=30,
                   json={"model": "m", "messages": [{"role": "user", "content": prompt}]})
    assert r.status_code == 200, r.text


def _processes(proc: RouterProc, auth: dict) -> dict[str, dict]:
    got = httpx.get(proc.url + "/api/v1/prefix-index", headers=auth, timeout=30).json()
    assert got["enabled"] is True and got["block_chars"] == 16, got
    return {p["id"]: p for p in got["processes"]}


def _all(proc: RouterProc, auth: dict, test) -> bool:
    processes = _processes(proc, auth)
    return len(processes) == 2 and all(test(p) for p in processes.values())


def test_every_processs_index_is_listed_and_purged(pair):
    first, second, auth = pair
    for i in range(3):
        _ask(first, i)
        _ask(second, i)
    wait_until(lambda: _all(first, auth, lambda p: p["entries"] > 0 and p["replicas"] == 1), 30,
               what="both processes to publish their index")
    r = httpx.post(second.url + "/api/v1/prefix-index/purge?backend=a", headers=auth, timeout=30)
    assert r.status_code == 200 and r.json() == {"backend": "a", "processes": 2}, r.text
    wait_until(lambda: _all(first, auth, lambda p: p["replicas"] == 0), 30, what="a's prefixes forgotten everywhere")
    r = httpx.post(first.url + "/api/v1/prefix-index/purge", headers=auth, timeout=30)
    assert r.json() == {"backend": None, "processes": 2}, r.text
    wait_until(lambda: _all(first, auth, lambda p: p["entries"] == 0), 30, what="every index emptied")
    _ask(first, 9)  # routing goes on, and the index fills again
    assert httpx.get(first.url + "/status", headers=first.status_headers, timeout=30).json()[
        "prefix_index"]["entries"] > 0
