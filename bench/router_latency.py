"""ROUTER mode: how fast a Manager change reaches every node (issue 9 note).

Two real nodes (web + tasks + events each, own SQLite and Redis namespace)
under one authority of the fake coordinator, as in tests/appproxy. For N
rounds it measures, on each node, from the start of the Manager call:

- publish → routable: a new publication (mapping an existing endpoint)
  until a chat completion for its name answers 200;
- revoke → refused: a key DELETE (not strict) until the key gets 401.

    .venv/bin/python bench/router_latency.py [--rounds 20]

Prints p50 / p95 / max per measurement and node. Numbers include the
polling client's own request time (~1-3 ms on loopback).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import httpx  # noqa: E402

from fakes import openai_backend  # noqa: E402
from tests.appproxy.router_support import RouterManager, RouterNode, new_key  # noqa: E402
from tests.appproxy.support import coordinator  # noqa: E402


def until(predicate, timeout: float = 30.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic()
        time.sleep(0.002)
    raise TimeoutError


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    replica = openai_backend.server_thread("lat-r1", ["served"]).start()
    fc = coordinator(ack_timeout=5.0)
    fc.start()
    authority = f"router-{uuid.uuid4().hex[:8]}"
    nodes = [RouterNode(fc, authority), RouterNode(fc, authority)]
    manager = RouterManager(fc, authority)
    clients = [httpx.Client(base_url=n.url, timeout=10) for n in nodes]
    results: dict[str, list[list[float]]] = {"publish → routable": [[], []], "revoke → 401": [[], []]}
    try:
        for node in nodes:
            node.start()
        endpoint = manager.endpoint("lat-ep", replica)
        plain, digest = new_key()
        manager.put_key("bench-caller", digest)
        auth = {"Authorization": f"Bearer {plain}"}
        for i in range(args.rounds):
            name = f"bench-model-{i}"
            body = {"model": name, "messages": [{"role": "user", "content": "hi"}]}
            started = time.monotonic()
            manager.publish(name, {endpoint: 1.0})
            for n, client in enumerate(clients):
                done = until(
                    lambda c=client, b=body: c.post("/v1/chat/completions", json=b, headers=auth).status_code == 200
                )
                results["publish → routable"][n].append((done - started) * 1000)

            victim, victim_hash = new_key()
            manager.put_key(f"victim-{i}", victim_hash)
            bearer = {"Authorization": f"Bearer {victim}"}
            for client in clients:
                until(lambda c=client, h=bearer: c.get("/v1/models", headers=h).status_code == 200)
            started = time.monotonic()
            manager.delete_key(f"victim-{i}")
            for n, client in enumerate(clients):
                done = until(lambda c=client, h=bearer: c.get("/v1/models", headers=h).status_code == 401)
                results["revoke → 401"][n].append((done - started) * 1000)
        print(f"{'measurement':22} {'node':>4} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}  (n={args.rounds})")
        for what, per_node in results.items():
            for n, values in enumerate(per_node):
                print(f"{what:22} {n:>4} {statistics.median(values):8.1f} {pct(values, 0.95):8.1f} {max(values):8.1f}")
    finally:
        for client in clients:
            client.close()
        for node in nodes:
            node.stop()
        fc.stop()
        replica.stop()


if __name__ == "__main__":
    main()
