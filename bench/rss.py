"""Web-process RSS over routing changes (issue 13: "RSS flat over 1,000 changes").

    .venv/bin/python bench/rss.py --scale 0.1 --changes 1000 --batch 100
    .venv/bin/python bench/rss.py --mode yaml --scale 0.1

Builds the node of bench/scale.py (its machinery: a temp SQLite database,
two web processes, the tasks process; ROUTER mode: the fake coordinator and
the events process), waits until the web processes are idle, then applies
``--changes`` changes through the public write paths -- ROUTER: route
replaces on distinct circuits through the fake's REST (events + pulls);
YAML: ``manage.py routerbackend add`` -- in batches of ``--batch``. After
each batch it waits until every change of the batch is visible in both web
processes and they are idle, and prints their RSS (VmRSS).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
import time
from pathlib import Path

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "bench" / "scale.py")
scale = importlib.util.module_from_spec(_spec)
sys.modules["bench_scale"] = scale
_spec.loader.exec_module(scale)


def vmrss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Sampler:
    def sample(self, label: str, done: int) -> None:
        mbs = [vmrss_mb(pid) for pid in self.web_pids()]
        self.samples.append((done, mbs))
        print(
            f"[rss] {label:>10} changes={done:>5}  " + "  ".join(f"web{i}={mb:7.1f} MB" for i, mb in enumerate(mbs)),
            flush=True,
        )

    def before_yaml(self) -> None:
        """What the YAML needs first."""

    async def after_start(self, s: aiohttp.ClientSession) -> None:
        pass

    async def after_changes(self, s: aiohttp.ClientSession) -> None:
        pass

    async def run(self) -> dict:
        """The node from scratch, its state seeded, then the change batches."""
        import os
        import subprocess

        env = self.env()
        try:
            os.environ.update(env)
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
            self.before_yaml()
            self.write_yaml()
            subprocess.run([scale.PY, "manage.py", "migrate", "-v0"], env=env, cwd=ROOT, check=True)
            import django

            django.setup()
            self.start_backends(env)
            self.seed()
            async with aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=120), connector=aiohttp.TCPConnector(limit=64)
            ) as s:
                self.start_tasks()
                await self.cold_start(s, "cold")
                await self.quiesce(self.args.settle_timeout * 4)
                self.sample("start", 0)
                await self.after_start(s)
                await self.changes(s)
                await self.after_changes(s)
        finally:
            self.teardown()
        return self.results

    async def wait_visible(self, s: aiohttp.ClientSession, probe) -> None:
        seen = await self.visible(s, time.perf_counter(), probe, self.args.change_timeout * 5)
        if None in seen:
            print(f"[rss] a change not visible in {self.args.change_timeout * 5:.0f} s: {seen}", flush=True)
        await self.quiesce(self.args.settle_timeout * 4)


class RouterRss(Sampler, scale.RouterBench):
    def one_change(self, i: int) -> None:
        kind = self.args.kind
        if kind == "mixed":
            kind = ("routes", "publications", "keys")[i % 3]
        if kind == "routes":  # new route ids: the circuit's backends are renamed
            ep, _ = self.circuits[i % len(self.circuits)]
            self.replace_routes(ep, [self.backend_ports[(i + r) % scale.FAKE_BACKENDS] for r in range(4)])
        elif kind == "publications":  # a new published model name each time
            self.fake_http(
                "PUT",
                f"/v2/routers/{self.authority}/models/rss-pub-{i}",
                {"aliases": [], "control_mode": "manual", "mappings": [{"endpoint_id": self.probe_ep, "ratio": 1.0}]},
            )
        elif kind == "flips":  # the probe circuit's one route: a dead port, then a live one (scale.py's 2b)
            self.replace_routes(self.probe_ep, [self.backend_ports[0] if i % 2 else self.dead_port])
        elif kind == "keys":  # a coordinator key deleted
            self.fake_http(
                "DELETE", f"/v2/routers/{self.authority}/api-keys/ck-{i % self.sizes['coordinator_keys']:06d}"
            )

    async def changes(self, s: aiohttp.ClientSession) -> None:
        done = 0
        while done < self.args.changes:
            n = min(self.args.batch, self.args.changes - done)
            for i in range(n):
                await asyncio.to_thread(self.one_change, done + i)
                if self.args.requests:
                    for port in self.web_ports:
                        await self.chat(s, port, "probe-model", self.plain[0])
                        await self.chat(s, port, self.model_of(0), self.plain[0])
                        await self.get_status(s, port, "/v1/models", self.plain[0])
            done += n
            # the probe circuit flips last: visible = the batch was applied
            good = (done // self.args.batch) % 2 == 0
            await asyncio.to_thread(
                self.replace_routes, self.probe_ep, [self.backend_ports[0] if good else self.dead_port]
            )
            await self.wait_visible(s, lambda p, g=good: self.probe_is(s, p, g))
            self.sample("batch", done)

    def before_yaml(self) -> None:
        self.start_fake()  # the YAML names its port

    def seed(self) -> None:
        n_keys = self.sizes["keys"]
        self.sizes["keys"] = self.sizes["operator_keys"]
        self.bulk_keys()
        self.sizes["keys"] = n_keys
        self.seed_fake()

    async def after_start(self, s: aiohttp.ClientSession) -> None:
        if self.args.warm:
            await self.warm(s)

    async def after_changes(self, s: aiohttp.ClientSession) -> None:
        await self.status_all(s, show=True)
        self.sample("/status", self.args.changes)

    async def status_all(self, s: aiohttp.ClientSession, show: bool = False) -> None:
        for port in self.web_ports:
            async with s.get(self.url(port, "/status"), headers={"authorization": f"Bearer {self.status_token}"}) as r:
                body = await r.read()
            if show:
                print(f"[rss] {port}: snapshot_refreshes {orjson.loads(body)['snapshot_refreshes']}", flush=True)

    async def warm(self, s: aiohttp.ClientSession) -> None:
        """What bench/scale.py does before its change rows: load, /v1/models, /status."""
        await self.cpu_per_request(s)
        self.sample("8-conn load", 0)
        await self.status_all(s)
        self.sample("/status", 0)
        await self.status_all(s)
        self.sample("/status", 0)


class YamlRss(Sampler, scale.Bench):
    async def changes(self, s: aiohttp.ClientSession) -> None:
        done = 0
        while done < self.args.changes:
            n = min(self.args.batch, self.args.changes - done)
            for i in range(n):
                await asyncio.to_thread(self.admin_add, f"rss-{done + i}", f"rss-{done + i}")
            done += n
            last = f"rss-{done - 1}"
            await self.wait_visible(s, lambda p, m=last: self._status_is(s, p, m, None, 200))
            self.sample("batch", done)

    def seed(self) -> None:
        self.bulk_keys()


def start_backends(self, env: dict) -> None:
    for i, port in enumerate(self.backend_ports):
        self.procs[f"backend{i}"] = scale.Proc(
            f"backend{i}",
            [
                scale.PY,
                "-m",
                "fakes.openai_backend",
                "--port",
                str(port),
                "--name",
                f"fake-{i}",
                "--models",
                "x",
                "--chunks",
                "5",
                "--chunk-delay",
                "0",
                "--quiet",
            ],
            env,
            self.tmp / f"backend{i}.log",
        )


Sampler.start_backends = start_backends


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["yaml", "router"], default="router")
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--changes", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument(
        "--kind",
        choices=["routes", "publications", "keys", "flips", "mixed"],
        default="routes",
        help="ROUTER: what each change is",
    )
    ap.add_argument("--requests", action="store_true", help="a chat and a /v1/models per web process per change")
    ap.add_argument("--warm", action="store_true", help="first what scale.py does before its change rows")
    ap.add_argument("--log-level", default="WARNING")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    # What bench/scale.py's Bench reads of its arguments.
    args.worker, args.small, args.reps, args.coord_keys = "sqlite", False, 5, 2000
    args.change_timeout, args.start_timeout, args.settle_timeout = 60.0, 300.0, 30.0
    args.reconcile_interval, args.ack_timeout, args.step_budget = 10.0, 3.0, 600.0
    args.loop_seconds = 5.0
    sys.path.insert(0, str(ROOT))
    bench = RouterRss(args) if args.mode == "router" else YamlRss(args)
    bench.samples = []
    asyncio.run(bench.run())
    if len(bench.samples) >= 2:
        (_, first), (n, last) = bench.samples[0], bench.samples[-1]
        print(
            "[rss] "
            + "  ".join(
                f"web{i}: {a:.1f} -> {b:.1f} MB ({b - a:+.1f}) over {n} changes"
                for i, (a, b) in enumerate(zip(first, last, strict=True))
            )
        )


if __name__ == "__main__":
    main()
