"""Side by side: the stock Backend.AI AppProxy worker and this router in legacy worker mode.

    .venv/bin/python bench/appproxy_stock.py                    # 8 s per scenario
    .venv/bin/python bench/appproxy_stock.py --duration 5 --repeat 3
    .venv/bin/python bench/appproxy_stock.py --json out.json
    .venv/bin/python bench/appproxy_stock.py --python /path/to/python3.13

The component this router replaces is the stock AppProxy worker
(PyPI `backend.ai-appproxy-worker`, 26.9.6, Python/aiohttp). It is installed
on first use into a bench-only venv, var/bench-appproxy-venv, with Python
>= 3.13 (`--python`, default /root/.pyenv/versions/3.13.0/bin/python, else
`python3.13` on PATH); it is never a dependency of the project, and none of
its code is in this repository.

Both workers talk to our fake coordinator (fakes/coordinator, the real wire
protocol) over a private redis-server started for the run (the stock worker
also needs Redis: its event bus, live/stat keys and service discovery). Per
target, in turn, a fresh coordinator; the worker starts and registers
(wildcard frontend, domain `.models.bench`); the manager API creates one
public endpoint (`POST /v2/endpoints/bulk`, the worker acks `created`) and
gives it one route (`POST /v2/endpoints/bulk/routes`) to the mock OpenAI
backend (fakes/openai_backend.py); the load then goes to the worker's
wildcard port with `Host: bench.models.bench:<port>`, the host of the URL
the coordinator returned for the endpoint.

- stock: `python -m ai.backend.appproxy.worker.server -f <toml>`: a
  master process and its `worker-0`; CPU is the pair's.
- router: what `manage.py runnode` starts for `appproxy.enabled`: web
  (uvicorn + uvloop + httptools), Celery worker, beat and `runworker
  appproxy`. CPU per request is all four's (`cpu ms/req`) and the web
  process's alone (`web ms/req`, the data plane).

Every process of the worker under test is pinned to CPU 0 (taskset); the
mock, the load generator (this process) and the coordinator (a thread of
it) to CPU 1. The same closed-loop load as bench/versus.py: non-streaming
and streaming chat completions at 16 connections and at 1. Per target and
scenario: rps, CPU ms per request (utime+stime from /proc of the
processes and their children), p50, p99, p99/p50, added p50 against the
mock directly and, for streams, added time to the first body byte. A table
and, with `--json`, every figure; `--repeat N` runs N rounds (each target
once per round) and prints medians.
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
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from versus import cpu_of, measure, median_of, router_cmd, summary, table, with_added

from bench import CHAT, PY, ROOT, free_port, load, start, stop, wait_http

sys.path.insert(0, str(ROOT))  # fakes.coordinator

STOCK_VERSION = "26.9.6"
STOCK_PACKAGE = f"backend.ai-appproxy-worker=={STOCK_VERSION}"
STOCK_VENV = ROOT / "var" / "bench-appproxy-venv"
DEFAULT_PYTHON = "/root/.pyenv/versions/3.13.0/bin/python"
API_SECRET = "bench-api-" + uuid.uuid4().hex
JWT_SECRET = "bench-jwt-" + uuid.uuid4().hex
DOMAIN = ".models.bench"
SERVICE = "bench"
LOAD_CPU, WORKER_CPU = "1", "0"


class Unavailable(RuntimeError):
    """The stock worker cannot be installed or run here; the message says why."""


# -- the stock worker's venv ------------------------------------------------------


def stock_python(python: str | None) -> Path:
    """The bench venv's interpreter with the stock worker installed (first use installs it)."""
    venv_py = STOCK_VENV / "bin" / "python"
    if venv_py.exists() and _has_stock(venv_py):
        return venv_py
    base = python or (DEFAULT_PYTHON if Path(DEFAULT_PYTHON).exists() else shutil.which("python3.13"))
    if not base:
        raise Unavailable(f"{STOCK_PACKAGE} needs Python >= 3.13; none found (give --python)")
    try:
        version = subprocess.run(
            [base, "-c", "import sys; print(sys.version_info >= (3, 13))"], capture_output=True, text=True
        )
    except OSError as exc:
        raise Unavailable(f"cannot run {base}: {exc}") from exc
    if version.stdout.strip() != "True":
        raise Unavailable(f"{base} is not Python >= 3.13, which {STOCK_PACKAGE} needs")
    try:
        if not venv_py.exists():
            subprocess.run([base, "-m", "venv", str(STOCK_VENV)], check=True)
        print(f"installing {STOCK_PACKAGE} into {STOCK_VENV} (first use)", file=sys.stderr)
        subprocess.run([str(venv_py), "-m", "pip", "install", "-q", STOCK_PACKAGE], check=True)
    except (subprocess.CalledProcessError, OSError) as exc:
        raise Unavailable(f"could not install {STOCK_PACKAGE} into {STOCK_VENV}: {exc}") from exc
    if not _has_stock(venv_py):
        raise Unavailable(f"{STOCK_PACKAGE} installed but ai.backend.appproxy.worker does not import")
    return venv_py


def _has_stock(venv_py: Path) -> bool:
    probe = (
        "import importlib.metadata as m, ai.backend.appproxy.worker.server; "
        "print(m.version('backend.ai-appproxy-worker'))"
    )
    out = subprocess.run([str(venv_py), "-c", probe], capture_output=True, text=True)
    return out.returncode == 0 and out.stdout.strip() == STOCK_VERSION


def stock_toml(
    *,
    redis_port: int,
    coordinator_url: str,
    authority: str,
    api_port: int,
    traffic_port: int,
    ipc: Path,
    log_level: str,
) -> str:
    """The stock worker's config (ai/backend/appproxy/worker/config.py ServerConfig):
    wildcard frontend, HTTP, inference traffic, against our coordinator."""
    mon = free_port(), free_port()
    return f"""\
[redis]
addr = {{ host = "127.0.0.1", port = {redis_port} }}

[proxy_worker]
coordinator_endpoint = "{coordinator_url}"
authority = "{authority}"
api_bind_addr = {{ host = "127.0.0.1", port = {api_port} }}
frontend_mode = "wildcard"
protocol = "http"
accepted_traffics = ["inference"]
heartbeat_period = 10.0
aiomonitor_termui_port = {mon[0]}
aiomonitor_webui_port = {mon[1]}
ipc_base_path = "{ipc}"

[proxy_worker.wildcard_domain]
bind_addr = {{ host = "127.0.0.1", port = {traffic_port} }}
domain = "{DOMAIN}"

[secrets]
jwt_secret = "{JWT_SECRET}"
api_secret = "{API_SECRET}"

[permit_hash]
secret = "bench-permit-{uuid.uuid4().hex}"

[logging]
level = "{log_level}"
drivers = ["console"]

[debug]
enabled = false
"""


# -- this router's node -----------------------------------------------------------


def router_yaml(*, redis_port: int, coordinator_url: str, authority: str, port: int) -> str:
    return f"""\
backends: []
api_keys: {{mode: open}}
health: {{enabled: false}}
appproxy:
  enabled: true
  coordinator_url: "{coordinator_url}"
  api_secret: "${{APPPROXY_API_SECRET}}"
  jwt_secret: "${{APPPROXY_JWT_SECRET}}"
  redis_url: "redis://127.0.0.1:{redis_port}/4"
  authority: "{authority}"
  hostname: "127.0.0.1"
  frontend_mode: wildcard
  wildcard_domain: "{DOMAIN}"
  wildcard_traffic_port: {port}
  heartbeat_period: "10s"
  reconcile_interval: "15s"
"""


def node_cmds(port: int, tmp: Path, authority: str) -> dict[str, list[str]]:
    """What `manage.py runnode` starts for a legacy worker node (node/management/commands/runnode.py)."""
    return {
        "web": router_cmd("uvicorn", port),
        "tasks": [
            PY,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            "4",
            "--loglevel",
            "WARNING",
            "--without-mingle",
            "--without-gossip",
            "-n",
            f"tasks-{authority}@%h",
        ],
        "beat": [
            PY,
            "-m",
            "celery",
            "-A",
            "config",
            "beat",
            "--loglevel",
            "WARNING",
            "--schedule",
            str(tmp / "celerybeat-schedule"),
        ],
        "events": [PY, "manage.py", "runworker", "appproxy"],
    }


# -- the manager's side of the coordinator ---------------------------------------


def create_endpoint(fc, kernel_port: int) -> str:
    """One public endpoint with one route to the mock; returns the Host its URL names."""
    endpoint_id = str(uuid.uuid4())
    item = {
        "deployment_id": endpoint_id,
        "service_name": SERVICE,
        "tags": {
            "session": {"user_uuid": str(uuid.uuid4()), "project_id": str(uuid.uuid4()), "domain_name": "default"},
            "endpoint": {"id": endpoint_id, "runtime_variant": "vllm"},
        },
        "open_to_public": True,
    }
    with httpx.Client(base_url=fc.url, headers=fc.headers, timeout=60) as http:
        r = http.post("/v2/endpoints/bulk", json={"endpoints": [item]})
        if r.status_code != 200:
            raise RuntimeError(f"endpoint create failed ({r.status_code}): {r.text[:300]}")
        url = r.json()["endpoints"][0]["url"]
        route = {
            "session_id": str(uuid.uuid4()),
            "route_id": str(uuid.uuid4()),
            "kernel_host": "127.0.0.1",
            "kernel_port": kernel_port,
        }
        r = http.post(
            "/v2/endpoints/bulk/routes", json={"endpoints": [{"deployment_id": endpoint_id, "routes": [route]}]}
        )
        if r.status_code != 200:
            raise RuntimeError(f"route update failed ({r.status_code}): {r.text[:300]}")
    return urlsplit(url).netloc


async def wait_routed(
    url: str, host: str, procs: dict[str, subprocess.Popen], logs: list[Path], timeout: float = 120.0
) -> None:
    """Until a chat completion with that Host answers 200 (the route is applied)."""
    deadline = time.monotonic() + timeout
    last = ""
    async with httpx.AsyncClient(timeout=5) as client:
        while time.monotonic() < deadline:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    tail = "\n".join(p.read_text(errors="replace")[-1500:] for p in logs if p.exists())
                    raise RuntimeError(f"{name} exited ({proc.returncode}):\n{tail}")
            try:
                r = await client.post(url, json=CHAT, headers={"host": host})
                if r.status_code == 200:
                    return
                last = f"{r.status_code} {r.text[:200]}"
            except httpx.HTTPError as exc:
                last = repr(exc)
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} (Host {host}) never answered 200; last: {last}")


# -- one target under the load ----------------------------------------------------


PY_SPY = STOCK_VENV / "bin" / "py-spy"
IDLE_SECONDS = 5.0


def ensure_py_spy() -> Path:
    if not PY_SPY.exists():
        subprocess.run([str(STOCK_VENV / "bin" / "python"), "-m", "pip", "install", "-q", "py-spy"], check=True)
    return PY_SPY


async def profile(url: str, pid: int, out: Path, *, duration: float, headers: dict) -> None:
    """py-spy (collapsed stacks, --subprocesses) over an extra non-streaming 16-connection
    load; not part of the measured figures."""
    spy = subprocess.Popen(
        [
            str(ensure_py_spy()),
            "record",
            "--pid",
            str(pid),
            "--subprocesses",
            "--nonblocking",
            "--rate",
            "200",
            "--duration",
            str(int(duration)),
            "--format",
            "raw",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    await load(url, orjson.dumps(CHAT), concurrency=16, duration=duration + 1, stream=False, headers=headers)
    await asyncio.to_thread(spy.wait, 60)


async def idle_cpu(pids: dict[str, int]) -> dict[str, float]:
    """CPU ms per second of each of the worker's processes while idle (registered, route
    applied, no requests), and their sum under "total"."""
    c0 = cpu_of(pids)
    await asyncio.sleep(IDLE_SECONDS)
    c1 = cpu_of(pids)
    out = {k: (c1[k] - c0[k]) * 1000 / IDLE_SECONDS for k in pids}
    out["total"] = sum(out.values())
    return out


def start_coordinator(redis_port: int):
    """A fresh fake coordinator per target (its events on the run's Redis)."""
    from fakes.coordinator import FakeCoordinator

    return FakeCoordinator(
        api_secret=API_SECRET,
        jwt_secret=JWT_SECRET,
        redis_url=f"redis://127.0.0.1:{redis_port}/4",
        heartbeat_timeout=3600,
        lost_check_interval=3600,
    ).start()


async def run_stock(
    venv_py: Path,
    *,
    tmp: Path,
    redis_port: int,
    backend_port: int,
    duration: float,
    log_level: str,
    profile_dir: Path | None,
) -> tuple[dict, dict[str, float]]:
    fc = start_coordinator(redis_port)
    authority = f"stock-{uuid.uuid4().hex[:6]}"
    traffic_port = free_port()
    cfg = tmp / f"{authority}.toml"
    cfg.write_text(
        stock_toml(
            redis_port=redis_port,
            coordinator_url=fc.url,
            authority=authority,
            api_port=free_port(),
            traffic_port=traffic_port,
            ipc=tmp / "ipc",
            log_level=log_level,
        )
    )
    log = tmp / f"{authority}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.Popen(
        ["taskset", "-c", WORKER_CPU, str(venv_py), "-m", "ai.backend.appproxy.worker.server", "-f", str(cfg)],
        env=env,
        cwd=tmp,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        await wait_registered(fc, authority, {"stock": proc}, [log])
        host = create_endpoint(fc, backend_port)
        url = f"http://127.0.0.1:{traffic_port}/v1/chat/completions"
        await wait_routed(url, host, {"stock": proc}, [log])
        headers = {"content-type": "application/json", "host": host}
        pids = {"stock": proc.pid}
        idle = await idle_cpu(pids)
        rows = await measure(url, pids, duration=duration, headers=headers)
        if profile_dir:
            await profile(url, proc.pid, profile_dir / "stock.txt", duration=duration, headers=headers)
        return rows, idle
    finally:
        stop(proc)
        fc.stop()


async def run_router(
    *, tmp: Path, env: dict, redis_port: int, backend_port: int, duration: float, profile_dir: Path | None
) -> tuple[dict, dict[str, float]]:
    fc = start_coordinator(redis_port)
    authority = f"router-{uuid.uuid4().hex[:6]}"
    port = free_port()
    (tmp / "router.yaml").write_text(
        router_yaml(redis_port=redis_port, coordinator_url=fc.url, authority=authority, port=port)
    )
    node_env = {**env, "ROUTER_PORT": str(port), "ROUTER_REDIS_PREFIX": f"bench-stock:{authority}:"}
    procs: dict[str, subprocess.Popen] = {}
    logs = []
    try:
        for name, cmd in node_cmds(port, tmp, authority).items():
            logs.append(tmp / f"{authority}-{name}.log")
            procs[name] = start(cmd, node_env, WORKER_CPU, logs[-1])
        await wait_http(f"http://127.0.0.1:{port}/readyz", timeout=120)
        await wait_registered(fc, authority, procs, logs)
        host = create_endpoint(fc, backend_port)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        await wait_routed(url, host, procs, logs)
        headers = {"content-type": "application/json", "host": host}
        pids = {name: p.pid for name, p in procs.items()}
        idle = await idle_cpu(pids)
        rows = await measure(url, pids, duration=duration, headers=headers, data_plane="web")
        if profile_dir:
            await profile(url, procs["web"].pid, profile_dir / "router.txt", duration=duration, headers=headers)
        return rows, idle
    finally:
        for proc in procs.values():
            stop(proc)
        fc.stop()


async def wait_registered(
    fc, authority: str, procs: dict[str, subprocess.Popen], logs: list[Path], timeout: float = 120.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = fc.worker(authority)
        if row and row["status"] == "ALIVE":
            return
        for name, proc in procs.items():
            if proc.poll() is not None:
                tail = "\n".join(p.read_text(errors="replace")[-3000:] for p in logs if p.exists())
                raise Unavailable(f"{name} exited ({proc.returncode}) before registering:\n{tail}")
        await asyncio.sleep(0.2)
    raise Unavailable(f"{authority} did not register with the coordinator within {timeout:.0f}s")


# -- report ---------------------------------------------------------------------------


def web_column(results: dict) -> str:
    lines = [f"{'target':<18}{'scenario':<12}{'conn':>5}{'web ms/req':>11}"]
    for target, rows in results.items():
        for key, r in rows.items():
            if r.get("web_cpu_ms_per_req") is not None:
                name, conc = key.split("/")
                lines.append(f"{target:<18}{name:<12}{conc:>5}{r['web_cpu_ms_per_req']:>11.3f}")
    return "\n".join(lines)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--repeat", type=int, default=1, help="rounds; each figure is the median over them")
    ap.add_argument("--python", help=f"Python >= 3.13 for the stock worker's venv (default {DEFAULT_PYTHON})")
    ap.add_argument(
        "--log-level",
        default="INFO",
        help="both workers' log level (ROUTER_LOG_LEVEL; the stock worker's [logging] level)",
    )
    ap.add_argument("--no-stock", action="store_true", help="only direct + this router")
    ap.add_argument(
        "--profile",
        metavar="DIR",
        help="also py-spy each worker's data plane (collapsed stacks into "
        "DIR/stock.txt, DIR/router.txt) over an extra, unmeasured load",
    )
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    for tool in ("taskset", "redis-server"):
        if not shutil.which(tool):
            raise SystemExit(
                f"appproxy_stock: {tool} is required (the workers are pinned with taskset; the stock "
                "worker and both coordinators' event bus use a private redis-server)"
            )
    try:
        venv_py = None if args.no_stock else stock_python(args.python)
    except Unavailable as exc:
        raise SystemExit(f"appproxy_stock: the stock AppProxy worker is not available: {exc}") from None
    os.sched_setaffinity(0, {int(LOAD_CPU)})  # the load generator and the coordinator thread

    tmp = Path(tempfile.mkdtemp(prefix="router-appproxy-stock-"))
    redis_port, backend_port = free_port(), free_port()
    env = {
        **os.environ,
        "ROUTER_CONFIG": str(tmp / "router.yaml"),
        "ROUTER_VAR_DIR": str(tmp),
        "ROUTER_LOG_LEVEL": args.log_level,
        "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "APPPROXY_API_SECRET": API_SECRET,
        "APPPROXY_JWT_SECRET": JWT_SECRET,
        "ROUTER_STATUS_TOKEN": "bench-" + uuid.uuid4().hex,
        "PYTHONUNBUFFERED": "1",
    }
    (tmp / "router.yaml").write_text(
        router_yaml(redis_port=redis_port, coordinator_url="http://127.0.0.1:1", authority="migrate", port=1)
    )
    subprocess.run([PY, "manage.py", "migrate", "-v0"], env=env, cwd=ROOT, check=True)
    procs: list[subprocess.Popen] = []
    rounds: list[dict[str, dict]] = []
    idles: list[dict[str, dict[str, float]]] = []
    profile_dir = Path(args.profile).resolve() if args.profile else None
    if profile_dir:
        profile_dir.mkdir(parents=True, exist_ok=True)
    try:
        procs.append(
            start(
                ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                env,
                LOAD_CPU,
                tmp / "redis.log",
            )
        )
        procs.append(
            start(
                [
                    PY,
                    "-m",
                    "fakes.openai_backend",
                    "--port",
                    str(backend_port),
                    "--name",
                    "bench-a",
                    "--models",
                    "bench",
                    "--chunks",
                    "5",
                    "--chunk-delay",
                    "0",
                    "--quiet",
                ],
                env,
                LOAD_CPU,
                tmp / "backend.log",
            )
        )
        await wait_http(f"http://127.0.0.1:{backend_port}/health")
        durl = f"http://127.0.0.1:{backend_port}/v1/chat/completions"
        for _ in range(args.repeat):
            idle: dict[str, dict[str, float]] = {}
            # Round by round, so a neighbour's load on a shared machine falls on all targets alike.
            one = {
                "direct": await measure(
                    durl, None, duration=args.duration, headers={"content-type": "application/json"}
                )
            }
            if venv_py is not None:
                try:
                    one["stock"], idle["stock"] = await run_stock(
                        venv_py,
                        tmp=tmp,
                        redis_port=redis_port,
                        backend_port=backend_port,
                        duration=args.duration,
                        log_level=args.log_level,
                        profile_dir=profile_dir,
                    )
                except Unavailable as exc:
                    raise SystemExit(f"appproxy_stock: the stock AppProxy worker did not run: {exc}") from None
            one["router"], idle["router"] = await run_router(
                tmp=tmp,
                env=env,
                redis_port=redis_port,
                backend_port=backend_port,
                duration=args.duration,
                profile_dir=profile_dir,
            )
            rounds.append(one)
            idles.append(idle)
    finally:
        for p in procs:
            stop(p)
    results = median_of(rounds)
    for label, rows in results.items():
        if label != "direct":
            with_added(rows, results["direct"])
    print(
        f"stock={STOCK_PACKAGE} router=legacy wildcard worker (uvicorn) log_level={args.log_level} "
        f"duration={args.duration}s rounds={args.repeat} (medians) "
        "(each worker's processes pinned to cpu0; mock + load generator + coordinator on cpu1; ms)"
    )
    print(table(results))
    print("this router's web process alone (the data plane; cpu ms/req above is web + tasks + beat + events):")
    print(web_column(results))
    idle_cpu_ms = {t: {k: statistics.median(i[t][k] for i in idles) for k in idles[0][t]} for t in idles[0]}
    print(
        "idle CPU (registered, route applied, no requests), ms per second: "
        + "; ".join(
            f"{t} {v['total']:.1f} (" + ", ".join(f"{k} {x:.1f}" for k, x in v.items() if k != "total") + ")"
            for t, v in idle_cpu_ms.items()
        )
    )
    summ = summary(results, peer="stock", ratio_key="ratio_router_over_stock")
    for target, value in idle_cpu_ms.items():
        summ[target]["idle_cpu_ms_per_s"] = value["total"]
        summ[target]["idle_cpu_ms_per_s_by_process"] = value
    print(orjson.dumps(summ, option=orjson.OPT_INDENT_2).decode())
    if args.json:
        Path(args.json).write_text(
            orjson.dumps(
                {"results": results, "summary": summ, "stock": STOCK_PACKAGE, "rounds": rounds, "idle_rounds": idles},
                option=orjson.OPT_INDENT_2,
            ).decode()
        )
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
