"""Router benchmark: requests/s, router CPU ms per request, added latency.

Starts a fast fake OpenAI-compatible backend and the router (pinned to one
core with taskset when available), then drives both the router and the
backend directly with the same load, non-streaming and streaming.

    .venv/bin/python bench/bench.py                   # uvicorn, defaults
    .venv/bin/python bench/bench.py --server daphne
    .venv/bin/python bench/bench.py --api-key         # through the key gate
    .venv/bin/python bench/bench.py --connections 500 # saturation: p50/p99, 503 rate
    .venv/bin/python bench/bench.py --connections 500 --max-concurrent 0  # no admission limit
    .venv/bin/python bench/bench.py --strategy cache_aware --replicas 2000 --system-chars 4000
    .venv/bin/python bench/bench.py --response-cache memory  # proxied (bypass) vs miss vs memory hit
    .venv/bin/python bench/bench.py --response-cache redis   # the same with no memory tier: Redis hits

Numbers are printed as a table and as JSON (--json FILE).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime+stime of a process and its threads, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url) as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


CHAT = {"model": "bench", "messages": [{"role": "user", "content": "Say hello."}]}


async def load(url: str, body: bytes | list[bytes], *, concurrency: int, duration: float, stream: bool,
               headers: dict) -> dict:
    """Closed-loop load: `concurrency` workers, each sending back to back
    (the bodies in turn, when there are several)."""
    bodies = body if isinstance(body, list) else [body]
    sent = 0
    latencies: list[float] = []
    firsts: list[float] = []
    errors = 0
    stop_at = time.monotonic() + duration
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal errors, sent
            while time.monotonic() < stop_at:
                t0 = time.perf_counter()
                sent += 1
                try:
                    async with session.post(url, data=bodies[sent % len(bodies)], headers=headers) as r:
                        if stream:
                            first = None
                            async for _chunk in r.content.iter_any():
                                if first is None:
                                    first = time.perf_counter() - t0
                            firsts.append(first or 0.0)
                        else:
                            await r.read()
                        if r.status != 200:
                            errors += 1
                            continue
                except aiohttp.ClientError:
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - t0)

        t_start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - t_start
    n = len(latencies)
    return {
        "requests": n,
        "errors": errors,
        "rps": n / elapsed if elapsed else 0.0,
        "p50_ms": statistics.median(latencies) * 1000 if latencies else None,
        "p99_ms": (sorted(latencies)[int(n * 0.99) - 1] * 1000) if n > 100 else None,
        "first_p50_ms": statistics.median(firsts) * 1000 if firsts else None,
    }


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000


async def saturate(url: str, probe_url: str, body: bytes, *, connections: int, duration: float, headers: dict) -> dict:
    """`connections` clients at once, each sending back to back; a 503 is
    retried after its Retry-After (as the OpenAI SDK does). /livez is probed
    alongside on its own connection, so its latency shows the serving layer."""
    ok: list[float] = []
    shed: list[float] = []
    probes: list[float] = []
    other = 0
    stop_at = time.monotonic() + duration
    timeout = aiohttp.ClientTimeout(total=120)
    connector = aiohttp.TCPConnector(limit=connections + 1, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker() -> None:
            nonlocal other
            while time.monotonic() < stop_at:
                t0 = time.perf_counter()
                try:
                    async with session.post(url, data=body, headers=headers) as r:
                        await r.read()
                        elapsed = time.perf_counter() - t0
                        if r.status == 200:
                            ok.append(elapsed)
                        elif r.status == 503:
                            shed.append(elapsed)
                            await asyncio.sleep(float(r.headers.get("retry-after", "1")))
                        else:
                            other += 1
                except (TimeoutError, aiohttp.ClientError):
                    other += 1

        async def prober() -> None:
            while time.monotonic() < stop_at:
                t0 = time.perf_counter()
                try:
                    async with session.get(probe_url) as r:
                        await r.read()
                        probes.append(time.perf_counter() - t0)
                except (TimeoutError, aiohttp.ClientError):
                    pass
                await asyncio.sleep(0.2)

        t_start = time.perf_counter()
        await asyncio.gather(prober(), *(worker() for _ in range(connections)))
        elapsed = time.perf_counter() - t_start
    attempts = len(ok) + len(shed) + other
    return {
        "connections": connections,
        "ok": len(ok),
        "shed_503": len(shed),
        "other_errors": other,
        "ok_rps": len(ok) / elapsed if elapsed else 0.0,
        "rate_503": len(shed) / attempts if attempts else 0.0,
        "p50_ms": pct(ok, 0.50),
        "p99_ms": pct(ok, 0.99),
        "shed_p99_ms": pct(shed, 0.99),
        "livez_p99_ms": pct(probes, 0.99),
    }


def start(cmd: list[str], env: dict, cpu: str | None, log: Path) -> subprocess.Popen:
    if cpu is not None and shutil.which("taskset"):
        cmd = ["taskset", "-c", cpu, *cmd]
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def router_pid(proc: subprocess.Popen) -> int:
    """The server process itself (taskset execs, so it is the same pid)."""
    return proc.pid


async def scenario(name, router_url, direct_url, body, *, concurrency, duration, stream, headers, pid):
    await load(router_url, body, concurrency=concurrency, duration=min(2.0, duration), stream=stream, headers=headers)  # warm up
    c0 = cpu_seconds(pid)
    via = await load(router_url, body, concurrency=concurrency, duration=duration, stream=stream, headers=headers)
    c1 = cpu_seconds(pid)
    direct = await load(direct_url, body, concurrency=concurrency, duration=duration, stream=stream, headers={})
    cpu_ms = (c1 - c0) * 1000 / via["requests"] if via["requests"] else None
    row = {"scenario": name, "concurrency": concurrency, "router": via, "direct": direct, "router_cpu_ms_per_req": cpu_ms}
    if via["p50_ms"] is not None and direct["p50_ms"] is not None:
        row["added_p50_ms"] = via["p50_ms"] - direct["p50_ms"]
    if stream and via["first_p50_ms"] is not None and direct["first_p50_ms"] is not None:
        row["added_first_event_ms"] = via["first_p50_ms"] - direct["first_p50_ms"]
    return row


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", choices=["uvicorn", "daphne"], default="uvicorn")
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--api-key", action="store_true", help="blocking mode, requests carry a valid key")
    ap.add_argument("--connections", type=int, help="only a saturation run with this many connections at once")
    ap.add_argument("--max-concurrent", type=int, help="the router's ROUTER_MAX_CONCURRENT (0: no admission limit)")
    ap.add_argument("--strategy", default="weighted_round_robin", help="selection_strategy")
    ap.add_argument("--replicas", type=int, default=1,
                    help="backends in the model's group (all names for the one fake backend)")
    ap.add_argument("--system-chars", type=int, default=0,
                    help="a system prompt of this many characters, different for each of 64 conversations")
    ap.add_argument("--response-cache", choices=["off", "memory", "redis"], default="off",
                    help="response_cache on; rows: a proxied request (not cacheable: bypass), a miss (distinct "
                         "temperature-0 bodies) and a hit, from memory or (max_bytes: 0) from Redis")
    ap.add_argument("--limits", choices=["off", "node", "cluster"], default="off",
                    help="a global rate limit and a backend quota too high to refuse anything, their buckets "
                         "in each process (node) or in Redis (cluster): what taking them costs")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--log-level", default="INFO", help="router ROUTER_LOG_LEVEL (INFO logs one line per request)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="router-bench-"))
    backend_port, router_port = free_port(), free_port()
    cfg = tmp / "bench.yaml"
    rows = "".join(
        f"  - name: bench-{chr(97 + i) if args.replicas == 1 else i}\n    url: http://127.0.0.1:{backend_port}\n"
        "    models: [bench]\n" + ("    quota: {rps: 1000000, tpm: 1000000000}\n" if args.limits != "off" else "")
        for i in range(args.replicas)
    )
    cfg.write_text(
        f"selection_strategy: {args.strategy}\nbackends:\n{rows}"
        f"api_keys:\n  mode: {'blocking' if args.api_key else 'open'}\n"
        "health:\n  enabled: false\n"
        + ("" if args.limits == "off" else
           f"rate_limits:\n  scope: {args.limits}\n  global: {{rps: 1000000}}\n  per_ip: {{rps: 1000000}}\n")
        + ("" if args.response_cache == "off" else
           "response_cache:\n  enabled: true\n" + ("  max_bytes: 0\n" if args.response_cache == "redis" else ""))
    )
    env = {**os.environ, "ROUTER_CONFIG": str(cfg), "ROUTER_VAR_DIR": str(tmp), "ROUTER_LOG_LEVEL": args.log_level,
           "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}", "PYTHONUNBUFFERED": "1"}
    if args.max_concurrent is not None:
        env["ROUTER_MAX_CONCURRENT"] = str(args.max_concurrent)
    subprocess.run([PY, "manage.py", "migrate", "-v0"], env=env, cwd=ROOT, check=True)
    headers = {"content-type": "application/json"}
    if args.api_key:
        out = subprocess.run([PY, "manage.py", "createapikey", "--name", "bench"], env=env, cwd=ROOT,
                             check=True, capture_output=True, text=True).stdout
        headers["authorization"] = "Bearer " + out.strip().splitlines()[-1]
    backend = start([PY, "-m", "fakes.openai_backend", "--port", str(backend_port), "--name", "bench-a",
                     "--models", "bench", "--chunks", "5", "--chunk-delay", "0", "--quiet"], env, "1", tmp / "backend.log")
    if args.server == "uvicorn":
        cmd = [PY, "-m", "uvicorn", "config.asgi:application", "--port", str(router_port), "--loop", "uvloop",
               "--http", "config.server:HttpToolsProtocol", "--no-access-log", "--log-level", "warning", "--no-proxy-headers"]
    else:
        cmd = [PY, "-m", "daphne", "-p", str(router_port), "config.asgi:application"]
    router = start(cmd, env, "0", tmp / "router.log")
    try:
        await wait_http(f"http://127.0.0.1:{backend_port}/health")
        await wait_http(f"http://127.0.0.1:{router_port}/readyz")
        rurl = f"http://127.0.0.1:{router_port}/v1/chat/completions"
        durl = f"http://127.0.0.1:{backend_port}/v1/chat/completions"
        chats = [CHAT]
        if args.system_chars:
            chats = [{**CHAT, "messages": [{"role": "system", "content": (f"Conversation {i}. " * args.system_chars)[
                : args.system_chars]}, *CHAT["messages"]]} for i in range(64)]
        plain = [orjson.dumps(c) for c in chats]
        streaming = [orjson.dumps({**c, "stream": True}) for c in chats]
        pid = router_pid(router)
        if args.connections:
            await load(rurl, plain, concurrency=16, duration=2.0, stream=False, headers=headers)  # warm up
            sat = await saturate(rurl, f"http://127.0.0.1:{router_port}/livez", plain[0], connections=args.connections,
                                 duration=args.duration, headers=headers)
            print(f"server={args.server} ROUTER_MAX_CONCURRENT={env.get('ROUTER_MAX_CONCURRENT', 'default')} "
                  "(router pinned to cpu0; backend+load on cpu1)")
            def ms(v):
                return f"{v:.0f}" if isinstance(v, float) else "-"
            print(f"{'conns':>6}{'ok rps':>9}{'ok p50':>9}{'ok p99':>9}{'503 rate':>10}{'503 p99':>9}"
                  f"{'livez p99':>11}{'errors':>8}   (ms)")
            print(f"{sat['connections']:>6}{sat['ok_rps']:>9.0f}{ms(sat['p50_ms']):>9}{ms(sat['p99_ms']):>9}"
                  f"{sat['rate_503']:>10.1%}{ms(sat['shed_p99_ms']):>9}{ms(sat['livez_p99_ms']):>11}{sat['other_errors']:>8}")
            if args.json:
                Path(args.json).write_text(orjson.dumps(sat, option=orjson.OPT_INDENT_2).decode())
            shutil.rmtree(tmp, ignore_errors=True)
            return
        if args.response_cache != "off":
            nonce = os.urandom(6).hex()  # entries of an earlier run (in Redis) must not answer this one
            deterministic = {**CHAT, "temperature": 0, "messages": [{"role": "user", "content": f"Say hello. {nonce}"}]}
            distinct = [orjson.dumps({**deterministic, "seed": i}) for i in range(200_000)]
            same = [orjson.dumps(deterministic)]
            same_stream = [orjson.dumps({**deterministic, "stream": True})]
            await load(rurl, same, concurrency=1, duration=0.5, stream=False, headers=headers)  # stored
            kw = {"concurrency": args.concurrency, "duration": args.duration, "headers": headers, "pid": pid}
            rows = [
                await scenario("proxied", rurl, durl, plain, stream=False, **kw),
                await scenario("miss", rurl, durl, distinct, stream=False, **kw),
                await scenario(f"{args.response_cache}-hit", rurl, durl, same, stream=False, **kw),
                await scenario("proxied", rurl, durl, streaming, stream=True, **kw),
                await scenario(f"{args.response_cache}-hit", rurl, durl, same_stream, stream=True, **kw),
                await scenario("proxied", rurl, durl, plain, stream=False, **{**kw, "concurrency": 1}),
                await scenario(f"{args.response_cache}-hit", rurl, durl, same, stream=False, **{**kw, "concurrency": 1}),
            ]
        else:
            rows = [
                await scenario("non-stream", rurl, durl, plain, concurrency=args.concurrency, duration=args.duration, stream=False, headers=headers, pid=pid),
                await scenario("non-stream", rurl, durl, plain, concurrency=1, duration=args.duration / 2, stream=False, headers=headers, pid=pid),
                await scenario("stream", rurl, durl, streaming, concurrency=args.concurrency, duration=args.duration, stream=True, headers=headers, pid=pid),
                await scenario("stream", rurl, durl, streaming, concurrency=1, duration=args.duration / 2, stream=True, headers=headers, pid=pid),
            ]
    finally:
        stop(router)
        stop(backend)
    print(f"server={args.server} api_key={args.api_key} log_level={args.log_level} strategy={args.strategy} "
          f"replicas={args.replicas} system_chars={args.system_chars} "
          f"response_cache={args.response_cache} limits={args.limits} (router pinned to cpu0; backend+load on cpu1)")
    print(f"{'scenario':<11}{'conc':>5}{'router rps':>12}{'direct rps':>12}{'cpu ms/req':>12}{'added p50':>11}{'added 1st':>11}{'errors':>8}")
    for r in rows:
        def f(v):
            return f"{v:.2f}" if isinstance(v, float) else "-"
        print(f"{r['scenario']:<11}{r['concurrency']:>5}{r['router']['rps']:>12.0f}{r['direct']['rps']:>12.0f}"
              f"{f(r['router_cpu_ms_per_req']):>12}{f(r.get('added_p50_ms')):>11}{f(r.get('added_first_event_ms')):>11}{r['router']['errors']:>8}")
    if args.json:
        Path(args.json).write_text(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
