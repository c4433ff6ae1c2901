"""Disaggregated prefill/decode: what the second leg costs the router.

One router process (uvicorn, as in the tests) in front of fake replicas on
loopback (fakes/pd_backend.py, instant answers): a unified model (one `both`
replica), a vLLM-disaggregated one (prefill + decode) and an SGLang one. For
each, `--requests` streaming chat completions are sent one after another by
`--clients` threads, and the script prints

- the router process's CPU per request (user + system from /proc, so only
  Linux), and its ratio to the unified path's (target: ≤ 2×);
- time to first byte at the client, p50 / p95, and what the two-leg path
  adds to the unified one's p50.

    .venv/bin/python bench/disaggregation.py [--requests 400] [--clients 4]

The fakes answer at once, so the added time to first token is the router's
and loopback's share only: a real prefill replica adds its prefill time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import httpx  # noqa: E402

from fakes import openai_backend, pd_backend  # noqa: E402
from tests.support.routerproc import RouterProc  # noqa: E402

CONFIG = """
backends:
  - {{name: u, url: '{u}', models: [uni]}}
  - {{name: vp, url: '{vp}', models: [pdv], role: prefill}}
  - {{name: vd, url: '{vd}', models: [pdv], role: decode}}
  - {{name: sp, url: '{sp}', models: [pds], role: prefill, bootstrap_port: 8998}}
  - {{name: sd, url: '{sd}', models: [pds], role: decode}}
disaggregation: {{pdv: vllm, pds: sglang}}
health: {{enabled: false}}
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(url: str, model: str, requests: int, clients: int) -> list[float]:
    ttfts: list[float] = []
    lock = threading.Lock()
    per_client = requests // clients
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}

    def client() -> None:
        with httpx.Client(timeout=60) as http:
            for _ in range(per_client):
                start = time.perf_counter()
                with http.stream("POST", url + "/v1/chat/completions", json=body) as r:
                    r.raise_for_status()
                    chunks = r.iter_bytes()
                    next(chunks)
                    first = time.perf_counter() - start
                    for _ in chunks:
                        pass
                with lock:
                    ttfts.append(first)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ttfts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    ledger = pd_backend.Ledger()
    servers = {
        "u": openai_backend.server_thread("u", ["uni"]),
        "vp": pd_backend.server_thread("vp", ["pdv"], protocol="vllm", role="prefill", ledger=ledger),
        "vd": pd_backend.server_thread("vd", ["pdv"], protocol="vllm", role="decode", ledger=ledger),
        "sp": pd_backend.server_thread("sp", ["pds"], protocol="sglang", role="prefill", ledger=ledger,
                                       bootstrap_port=8998),
        "sd": pd_backend.server_thread("sd", ["pds"], protocol="sglang", role="decode", ledger=ledger),
    }
    for s in servers.values():
        s.requests = None  # type: ignore[assignment]  # record nothing: the bench's own memory stays flat
        s.start()
    router = RouterProc(CONFIG.format(**{k: s.url for k, s in servers.items()})).start()
    try:
        assert router.proc is not None
        pid = router.proc.pid
        rows = []
        for label, model in (("unified", "uni"), ("vllm two-leg", "pdv"), ("sglang two-leg", "pds")):
            run(router.url, model, 40, 2)  # warm-up: connections, code paths
            before = cpu_seconds(pid)
            ttfts = run(router.url, model, args.requests, args.clients)
            used = cpu_seconds(pid) - before
            cpu = used / len(ttfts) * 1000.0
            print(f"{label}: {used:.2f} s of router CPU for {len(ttfts)} requests", file=sys.stderr)
            rows.append((label, cpu, statistics.median(ttfts) * 1000.0, sorted(ttfts)[int(0.95 * len(ttfts))] * 1000.0))
        base_cpu, base_p50 = rows[0][1], rows[0][2]
        print(f"{'path':16} {'router CPU/req':>15} {'×unified':>9} {'TTFB p50':>9} {'p95':>8} {'+p50':>8}")
        for label, cpu, p50, p95 in rows:
            print(f"{label:16} {cpu:12.2f} ms {cpu / base_cpu:8.2f}× {p50:6.2f} ms {p95:5.2f} ms "
                  f"{p50 - base_p50:+6.2f} ms")
    finally:
        router.stop()
        for s in servers.values():
            s.stop()


if __name__ == "__main__":
    main()
