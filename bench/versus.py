"""Side by side: the backend directly, this router, and vllm-router, in ONE run.

    .venv/bin/python bench/versus.py                      # uvicorn, 8 s per scenario
    .venv/bin/python bench/versus.py --server granian --duration 5
    .venv/bin/python bench/versus.py --no-vllm-router     # only direct + this router
    .venv/bin/python bench/versus.py --baseline HEAD~3    # also that commit's router (before/after)
    .venv/bin/python bench/versus.py --repeat 3           # 3 rounds, medians (a shared machine is noisy)
    .venv/bin/python bench/versus.py --json out.json

One mock backend (bench/bench.py's fake, fakes/openai_backend.py) on CPU 1 with the load generator; each router in
turn on CPU 0 (taskset), with the same closed-loop load: non-streaming and
streaming, at 16 connections and at 1. vllm-router (PyPI `vllm-router`, a
Rust router with a Python launcher) is installed into a bench-only venv,
var/bench-venv, on first use; it is never a dependency of the project.
vllm-router routes to one OpenAI-compatible worker with
`--worker-urls URL --policy round_robin`; it waits for the worker's
`/health`, which both mocks answer.

Per router and scenario: rps, CPU ms per request (utime+stime of the router
process and its threads over the run, /proc/<pid>/stat), p50, p99, p99/p50,
added p50 (router minus direct) and, for streams, added time to the first
body byte. A table and JSON. With `--baseline REV` the router of that git
revision (exported to a temporary tree, same venv) is measured too, in the
same run: on a shared machine, before/after figures from separate runs are
not comparable.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import CHAT, PY, ROOT, cpu_seconds, free_port, load, start, stop, wait_http

BENCH_VENV = ROOT / "var" / "bench-venv"
VLLM_ROUTER = BENCH_VENV / "bin" / "vllm-router"


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo.extend(int(c) for c in task.read_text().split())
            except OSError:
                pass
    return out


def tree_cpu(pid: int) -> float:
    """CPU seconds of a server and its worker processes (granian forks its
    workers; uvicorn with one worker and vllm-router are one process)."""
    total = 0.0
    for p in descendants(pid):
        try:
            total += cpu_seconds(p)
        except OSError:
            pass
    return total


def ensure_vllm_router() -> Path | None:
    """vllm-router in its own venv (var/bench-venv), installed on first use."""
    if VLLM_ROUTER.exists():
        return VLLM_ROUTER
    try:
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
        subprocess.run([str(BENCH_VENV / "bin" / "pip"), "install", "-q", "vllm-router"], check=True)
    except (subprocess.CalledProcessError, OSError) as exc:
        print(f"vllm-router not available ({exc}); skipped", file=sys.stderr)
        return None
    return VLLM_ROUTER if VLLM_ROUTER.exists() else None


# -- one router under the same load ------------------------------------------


async def measure(
    url: str, pids: dict[str, int] | None, *, duration: float, headers: dict, data_plane: str | None = None
) -> dict:
    """Non-streaming and streaming, 16 connections and 1, after a warm-up:
    rps, latencies and, with `pids` (name -> pid, each counted with its
    children), CPU ms per request of them all (and of `data_plane` alone)."""
    plain = orjson.dumps(CHAT)
    streaming = orjson.dumps({**CHAT, "stream": True})
    out = {}
    for name, body, stream in (("non-stream", plain, False), ("stream", streaming, True)):
        for conc in (16, 1):
            await load(url, body, concurrency=conc, duration=min(2.0, duration), stream=stream, headers=headers)
            c0 = cpu_of(pids) if pids else {}
            r = await load(url, body, concurrency=conc, duration=duration if conc > 1 else duration / 2,
                           stream=stream, headers=headers)
            c1 = cpu_of(pids) if pids else {}
            if pids and r["requests"]:
                r["cpu_ms_per_req"] = sum(c1[k] - c0[k] for k in pids) * 1000 / r["requests"]
                if data_plane:
                    r["web_cpu_ms_per_req"] = (c1[data_plane] - c0[data_plane]) * 1000 / r["requests"]
            if r["p50_ms"] and r["p99_ms"]:
                r["p99_over_p50"] = r["p99_ms"] / r["p50_ms"]
            out[f"{name}/{conc}"] = r
    return out


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    return {name: tree_cpu(pid) for name, pid in pids.items()}


def median_of(rounds: list[dict[str, dict]]) -> dict[str, dict]:
    """Per target and scenario, the median of each figure over the rounds."""
    out: dict[str, dict] = {}
    for target in rounds[0]:
        out[target] = {}
        for key in rounds[0][target]:
            rows = [r[target][key] for r in rounds]
            merged = {}
            for field in rows[0]:
                values = [row.get(field) for row in rows if row.get(field) is not None]
                merged[field] = statistics.median(values) if values else None
            merged["errors"] = sum(row["errors"] for row in rows)
            out[target][key] = merged
    return out


def with_added(result: dict, direct: dict) -> dict:
    for key, r in result.items():
        d = direct[key]
        if r.get("p50_ms") is not None and d.get("p50_ms") is not None:
            r["added_p50_ms"] = r["p50_ms"] - d["p50_ms"]
        if key.startswith("stream") and r.get("first_p50_ms") is not None and d.get("first_p50_ms") is not None:
            r["added_first_ms"] = r["first_p50_ms"] - d["first_p50_ms"]
    return result


def table(results: dict) -> str:
    def f(v, spec=".2f"):
        return format(v, spec) if isinstance(v, (int, float)) else "-"

    lines = [f"{'target':<18}{'scenario':<12}{'conn':>5}{'rps':>8}{'cpu ms/req':>11}{'p50':>8}{'p99':>8}"
             f"{'p99/p50':>9}{'+p50':>7}{'+1st':>7}{'err':>5}"]
    for target, rows in results.items():
        for key, r in rows.items():
            name, conc = key.split("/")
            lines.append(
                f"{target:<18}{name:<12}{conc:>5}{f(r['rps'], '.0f'):>8}{f(r.get('cpu_ms_per_req'), '.3f'):>11}"
                f"{f(r['p50_ms']):>8}{f(r['p99_ms']):>8}{f(r.get('p99_over_p50'), '.1f'):>9}"
                f"{f(r.get('added_p50_ms')):>7}{f(r.get('added_first_ms')):>7}{r['errors']:>5}"
            )
    return "\n".join(lines)


def summary(results: dict, peer: str = "vllm-router", ratio_key: str = "ratio") -> dict:
    """The issue's figures: CPU/req and CPU/stream at 16, p99/p50 at 16, added
    first event at 1; with req/s and the web process's own CPU where measured;
    `ratio_key`: this router's CPU figures divided by `peer`'s."""
    out = {}
    for target, rows in results.items():
        if target == "direct":
            continue
        many, streams = rows["non-stream/16"], rows["stream/16"]
        out[target] = {
            "rps": many.get("rps"),
            "cpu_ms_req": many.get("cpu_ms_per_req"),
            "cpu_ms_stream": streams.get("cpu_ms_per_req"),
            "p50_ms": many["p50_ms"],
            "p99_ms": many["p99_ms"],
            "p99_over_p50": many.get("p99_over_p50"),
            "stream_p99_over_p50": streams.get("p99_over_p50"),
            "added_p50_ms": rows["non-stream/1"].get("added_p50_ms"),
            "added_first_ms": rows["stream/1"].get("added_first_ms"),
        }
        if "web_cpu_ms_per_req" in many:
            out[target]["web_cpu_ms_req"] = many["web_cpu_ms_per_req"]
            out[target]["web_cpu_ms_stream"] = streams.get("web_cpu_ms_per_req")
    if "router" in out and peer in out:
        ours, theirs = out["router"], out[peer]
        out[ratio_key] = {k: ours[k] / theirs[k] for k in ("cpu_ms_req", "cpu_ms_stream") if ours.get(k) and theirs.get(k)}
    return out


def router_cmd(server: str, port: int) -> list[str]:
    if server == "uvicorn":
        return [PY, "-m", "uvicorn", "config.asgi:application", "--port", str(port), "--loop", "uvloop",
                "--http", "config.server:HttpToolsProtocol", "--no-access-log", "--log-level", "warning",
                "--no-proxy-headers"]
    if server == "granian":
        return [PY, "-m", "granian", "--interface", "asgi", "--port", str(port), "--loop", "uvloop",
                "--no-ws", "--log-level", "warning", "--workers", "1", "config.asgi:application"]
    return [PY, "-m", "daphne", "-p", str(port), "config.asgi:application"]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", choices=["uvicorn", "granian", "daphne"], default="uvicorn")
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--no-vllm-router", action="store_true")
    ap.add_argument("--baseline", metavar="REV", help="also measure the router of this git revision")
    ap.add_argument("--log-level", default="INFO", help="this router's ROUTER_LOG_LEVEL")
    ap.add_argument("--router-env", action="append", default=[], help="NAME=VALUE for this router (repeatable)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds; each figure is the median over them")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="router-versus-"))
    backend_port, router_port, vr_port = free_port(), free_port(), free_port()
    cfg = tmp / "bench.yaml"
    cfg.write_text(
        f"backends:\n  - name: bench-a\n    url: http://127.0.0.1:{backend_port}\n    models: [bench]\n"
        "api_keys:\n  mode: open\nhealth:\n  enabled: false\n"
    )
    env = {**os.environ, "ROUTER_CONFIG": str(cfg), "ROUTER_VAR_DIR": str(tmp), "ROUTER_LOG_LEVEL": args.log_level,
           "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}", "PYTHONUNBUFFERED": "1"}
    for item in args.router_env:
        name, _, value = item.partition("=")
        env[name] = value
    subprocess.run([PY, "manage.py", "migrate", "-v0"], env=env, cwd=ROOT, check=True)
    headers = {"content-type": "application/json"}
    durl = f"http://127.0.0.1:{backend_port}/v1/chat/completions"
    procs = []
    results: dict[str, dict] = {}
    mock = "fake"
    try:
        fake = start([PY, "-m", "fakes.openai_backend", "--port", str(backend_port), "--name", "bench-a",
                      "--models", "bench", "--chunks", "5", "--chunk-delay", "0", "--quiet"], env, "1", tmp / "backend.log")
        procs.append(fake)
        await wait_http(f"http://127.0.0.1:{backend_port}/health")
        trees = [("router", ROOT)]
        if args.baseline:
            base = tmp / "baseline"
            base.mkdir()
            archive = subprocess.run(["git", "archive", args.baseline], cwd=ROOT, check=True, capture_output=True)
            subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
            trees.insert(0, (f"router@{args.baseline}", base))
            # The baseline's own schema: a DB migrated by this tree may hold
            # columns its code does not fill.
            base_db = f"sqlite:///{tmp / 'db-baseline.sqlite3'}"
            subprocess.run([PY, "manage.py", "migrate", "-v0"], env={**env, "DATABASE_URL": base_db}, cwd=base,
                           check=True)
        vr = None if args.no_vllm_router else ensure_vllm_router()
        rounds: list[dict[str, dict]] = []
        for _ in range(args.repeat):
            # Round by round (every target once per round), so a neighbour's
            # load on a shared machine falls on all of them alike.
            one: dict[str, dict] = {"direct": await measure(durl, None, duration=args.duration, headers=headers)}
            for label, tree in trees:
                cmd = router_cmd(args.server if tree == ROOT else "uvicorn", router_port)
                tree_env = env if tree == ROOT else {**env, "DATABASE_URL": base_db}
                router = subprocess.Popen(["taskset", "-c", "0", *cmd], env=tree_env, cwd=tree,
                                          stdout=(tmp / f"{label}.log").open("ab"), stderr=subprocess.STDOUT,
                                          start_new_session=True)
                procs.append(router)
                await wait_http(f"http://127.0.0.1:{router_port}/readyz")
                one[label] = await measure(f"http://127.0.0.1:{router_port}/v1/chat/completions",
                                           {label: router.pid}, duration=args.duration, headers=headers)
                stop(router)
                procs.remove(router)
            if vr is not None:
                proc = start([str(vr), "--host", "127.0.0.1", "--port", str(vr_port), "--worker-urls",
                              f"http://127.0.0.1:{backend_port}", "--policy", "round_robin", "--log-level", "warning"],
                             env, "0", tmp / "vllm-router.log")
                procs.append(proc)
                await wait_http(f"http://127.0.0.1:{vr_port}/health")
                one["vllm-router"] = await measure(f"http://127.0.0.1:{vr_port}/v1/chat/completions",
                                                   {"vllm-router": proc.pid}, duration=args.duration,
                                                   headers=headers)
                stop(proc)
                procs.remove(proc)
            rounds.append(one)
        results = median_of(rounds)
        for label, rows in results.items():
            if label != "direct":
                with_added(rows, results["direct"])
    finally:
        for p in procs:
            stop(p)
    print(f"server={args.server} mock={mock} log_level={args.log_level} duration={args.duration}s "
          f"rounds={args.repeat} (medians) "
          "(routers pinned to cpu0; mock + load generator on cpu1; ms)")
    print(table(results))
    summ = summary(results)
    print(orjson.dumps(summ, option=orjson.OPT_INDENT_2).decode())
    if args.json:
        Path(args.json).write_text(orjson.dumps({"results": results, "summary": summ, "server": args.server,
                                                 "mock": mock, "rounds": rounds},
                                                option=orjson.OPT_INDENT_2).decode())
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
