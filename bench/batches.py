"""Batch throughput and the router's CPU per batch line against a /v1 request.

    .venv/bin/python bench/batches.py --lines 2000 --requests 2000 --concurrency 16

One router (uvicorn web process + its tasks process, a temp SQLite DB, the
shared Redis) in front of an instant fake OpenAI backend (in this process's
thread). In the same run:

1. `/v1`: `--requests` chat completions through the web process,
   `--concurrency` at a time; CPU ms per request = the web process's
   utime+stime over them / requests.
2. batch: one batch of `--lines` chat lines (ROUTER_BATCH_CONCURRENCY and
   ROUTER_BATCH_NODE_CONCURRENCY = `--concurrency`); lines/s from
   `in_progress_at` to the last line answered (request_counts, polled every
   0.2 s), CPU ms per line = the tasks process group's utime+stime over the
   run, less its idle rate (beat, probes) measured first, / lines.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import httpx  # noqa: E402
import openai  # noqa: E402
import orjson  # noqa: E402

from fakes import openai_backend  # noqa: E402
from tests.keys.e2e import create_key  # noqa: E402
from tests.support.routerproc import RouterProc  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
CONFIG = """
backends:
  - {{name: a, url: '{url}', models: [m]}}
health: {{enabled: false}}
api_keys: {{mode: blocking}}
"""


def cpu_of_group(pgid: int) -> float:
    """utime+stime (s) of every process in the process group `pgid`."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += (int(fields[11]) + int(fields[12])) / TICK
    return total


async def v1_requests(url: str, key: str, n: int, concurrency: int) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60,
                                 headers={"authorization": f"Bearer {key}"}) as client:
        left = iter(range(n))

        async def worker() -> None:
            for _ in left:
                response = await client.post("/v1/chat/completions", json=body)
                response.raise_for_status()

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    backend = openai_backend.server_thread("a", ["m"]).start()
    env = {"ROUTER_BATCH_CONCURRENCY": str(args.concurrency), "ROUTER_BATCH_NODE_CONCURRENCY": str(args.concurrency),
           "ROUTER_LOG_LEVEL": "WARNING"}
    router = RouterProc(CONFIG.format(url=backend.url), tasks=True, env=env)
    try:
        router.start()
        key = create_key(router, name=f"bench-{uuid.uuid4().hex[:6]}")
        client = openai.OpenAI(base_url=router.url + "/v1", api_key=key, max_retries=0, timeout=60)
        asyncio.run(v1_requests(router.url, key, 50, 4))  # warm up the web process
        web0, t0 = cpu_of_group(router.proc.pid), time.perf_counter()
        asyncio.run(v1_requests(router.url, key, args.requests, args.concurrency))
        web_s, v1_wall = cpu_of_group(router.proc.pid) - web0, time.perf_counter() - t0
        # The tasks process: warm its batch runtime with a one-line batch, then its idle rate.
        one = orjson.dumps({"custom_id": "w", "method": "POST", "url": "/v1/chat/completions",
                            "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}) + b"\n"
        warm = client.batches.create(
            input_file_id=client.files.create(file=("w.jsonl", io.BytesIO(one)), purpose="batch").id,
            endpoint="/v1/chat/completions", completion_window="24h")
        while client.batches.retrieve(warm.id).status != "completed":
            time.sleep(0.2)
        tasks_pgid = router.tasks.pid
        idle0 = cpu_of_group(tasks_pgid)
        time.sleep(5)
        idle_rate = (cpu_of_group(tasks_pgid) - idle0) / 5
        data = b"".join(
            orjson.dumps({"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions",
                          "body": {"model": "m", "messages": [{"role": "user", "content": f"line {i}"}]}}) + b"\n"
            for i in range(args.lines)
        )
        source = client.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
        c0, w0 = cpu_of_group(tasks_pgid), time.perf_counter()
        batch = client.batches.create(input_file_id=source.id, endpoint="/v1/chat/completions",
                                      completion_window="24h")
        while True:
            now = client.batches.retrieve(batch.id)
            if now.request_counts and now.request_counts.completed + now.request_counts.failed >= args.lines:
                answered = time.time()
                break
            time.sleep(0.2)
        wall = time.perf_counter() - w0
        tasks_s = cpu_of_group(tasks_pgid) - c0 - idle_rate * wall
        while (done := client.batches.retrieve(batch.id)).status != "completed":
            time.sleep(0.2)
        running = max(answered - (done.in_progress_at or 0), 1e-3)
        print(f"/v1:   {args.requests} requests at {args.concurrency} at once: {args.requests / v1_wall:,.0f} req/s, "
              f"web CPU {web_s * 1000 / args.requests:.2f} ms/request")
        print(f"batch: {args.lines} lines, concurrency {args.concurrency}: {args.lines / running:,.0f} lines/s "
              f"(in_progress → all answered, 1 s clock), {args.lines / wall:,.0f} lines/s create → all answered; "
              f"tasks CPU {tasks_s * 1000 / args.lines:.2f} ms/line (idle {idle_rate * 1000:.0f} ms/s subtracted); "
              f"{done.request_counts.completed} completed, {done.request_counts.failed} failed")
    finally:
        router.stop()
        backend.stop()


if __name__ == "__main__":
    main()
