"""Prompt-cache simulation: how much of each prompt a replica already holds,
per selection strategy, and how evenly the load spreads.

N replicas, each with an LRU prompt cache of a given token capacity kept in
fixed-size blocks (as vLLM's and SGLang's prefix caches are): a prompt's
cached part is its longest run of leading blocks the replica holds. The
workload is multi-turn chat sessions; each session's system prompt is drawn
with Zipf popularity from a few long ones, and every turn resends the whole
conversation plus a new user message. A second phase sends most traffic
under one system prompt. Requests arrive as a Poisson stream and stay in
flight for a time that grows with the uncached prompt and the answer, so
the in-flight counts the strategies see are the ones that matter.

The router's strategies run through the router's own code
(`router.core.selection.Selector`, `prefix_key`), beside: round robin
without weights; rendezvous hashing with no load bound, both on the key
`prefix_hash` used before (the first 256 characters of system prompt and
first user message together) and on today's; and a greedy oracle that
always picks the replica with the longest cached prefix (ties: fewest in
flight; it ignores load, so a hot prefix piles up and thrashes one cache,
and a hashing strategy can beat it there). Reported per strategy and
phase: the cache hit ratio (cached / prompt tokens, and as a share of the
oracle's) and the load imbalance (max / mean requests per replica).

    .venv/bin/python bench/prefix_sim.py
    .venv/bin/python bench/prefix_sim.py --replicas 8 --sessions 400 --json var/prefix_sim.json
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from router.core.backend import BackendSpec  # noqa: E402
from router.core.health import BackendState  # noqa: E402
from router.core.kvindex import chain  # noqa: E402
from router.core.selection import (  # noqa: E402
    CACHE_AWARE,
    DEFAULT_MIN_MATCH,
    KEYED,
    Candidate,
    Selector,
    _scores,
    prefix_key,
    prompt_text,
)
from router.core.snapshot import CacheAwarePolicy  # noqa: E402

BLOCK = 16  # tokens per cache block


@dataclass
class Replica:
    name: str
    capacity_blocks: int
    cache: OrderedDict[int, None] = field(default_factory=OrderedDict)
    in_flight: int = 0
    served: int = 0

    def cached_tokens(self, blocks: list[int]) -> int:
        n = 0
        for b in blocks:
            if b not in self.cache:
                break
            n += 1
        return n * BLOCK

    def admit(self, blocks: list[int]) -> None:
        for b in blocks:
            if b in self.cache:
                self.cache.move_to_end(b)
            else:
                self.cache[b] = None
        while len(self.cache) > self.capacity_blocks:
            self.cache.popitem(last=False)


def block_ids(tokens: list[int]) -> list[int]:
    """A chained hash per full block: block i names the whole prefix up to it."""
    out, h = [], 0
    for i in range(0, len(tokens) - len(tokens) % BLOCK, BLOCK):
        h = hash((h, tuple(tokens[i : i + BLOCK])))
        out.append(h)
    return out


@dataclass
class Request:
    session: int
    system_id: int
    tokens: list[int]
    body: dict
    answer_tokens: int


def zipf_choice(rng: random.Random, n: int, s: float) -> int:
    weights = [1 / (k + 1) ** s for k in range(n)]
    return rng.choices(range(n), weights)[0]


def workload(rng: random.Random, sessions: int, turns: int, systems: int, zipf: float,
             hot: float | None, system_chars: int) -> list[Request]:
    """Sessions' turns interleaved in arrival order; `hot`: the share of
    sessions that use system prompt 0 (the hot-prefix phase)."""
    system_tokens = [[rng.randrange(32000) for _ in range(rng.randint(400, 1600))] for _ in range(systems)]
    queues = []
    for s in range(sessions):
        sid = 0 if hot is not None and rng.random() < hot else zipf_choice(rng, systems, zipf)
        history = list(system_tokens[sid])
        messages = [{"role": "system", "content": _text(f"system prompt {sid} ", system_tokens[sid], system_chars)}]
        reqs = []
        for t in range(rng.randint(1, turns)):
            user = [rng.randrange(32000) for _ in range(rng.randint(20, 200))]
            history = history + user
            messages = [*messages, {"role": "user", "content": _text(f"session {s} turn {t} ", user)}]
            answer = rng.randint(50, 300)
            reqs.append(Request(s, sid, list(history), {"model": "m", "messages": messages}, answer))
            answer_tokens = [rng.randrange(32000) for _ in range(answer)]
            history = history + answer_tokens
            messages = [*messages, {"role": "assistant", "content": _text(f"answer {t} ", answer_tokens)}]
        queues.append(reqs)
    out: list[Request] = []
    live = [q for q in queues if q]
    while live:  # a random live session sends its next turn
        q = rng.choice(live)
        out.append(q.pop(0))
        if not q:
            live.remove(q)
    return out


def _text(head: str, tokens: list[int], chars: int | None = None) -> str:
    """A message's text: `head`, then ~4 characters per token (so the
    text-based strategies see prompts as long as the token-based caches do),
    or exactly `chars` characters."""
    body = head + " ".join(f"{t:03x}" for t in tokens)
    return body if chars is None else (body * (chars // max(len(body), 1) + 1))[:chars]


Picker = Callable[[Request, list[int], list[Replica]], Replica]


def selector_picker(strategy: str, min_match: float = DEFAULT_MIN_MATCH) -> Picker:
    sel = Selector(strategy, random.Random(1), min_match=min_match)
    policy = CacheAwarePolicy()

    def pick(req: Request, _blocks: list[int], replicas: list[Replica]) -> Replica:
        cands = [Candidate(BackendSpec(name=r.name, url="http://x", models=("m",)), BackendState(in_flight=r.in_flight))
                 for r in replicas]
        key = prefix_key(req.body) if strategy in KEYED else None
        blocks = ()
        if strategy == CACHE_AWARE:
            text = prompt_text(req.body, policy.max_prompt_chars)
            blocks = chain(1, text, policy.block_chars, policy.max_prompt_chars)
        chosen = sel.pick("m", cands, now=0.0, prefix_key=key, blocks=blocks)
        assert chosen is not None
        return next(r for r in replicas if r.name == chosen.spec.name)

    return pick


def unbounded_hash(old_key: bool) -> Picker:
    """Rendezvous hashing with no load bound: the key's winner, always. With
    `old_key`, on the key prefix_hash used before (the first 256 characters
    of system prompt and first user message together)."""

    def pick(req: Request, _blocks: list[int], replicas: list[Replica]) -> Replica:
        cands = [Candidate(BackendSpec(name=r.name, url="http://x", models=("m",)), BackendState()) for r in replicas]
        key = prefix_key(req.body, limit=10**9) if old_key else prefix_key(req.body)
        assert key is not None
        if old_key:
            key = key.decode()[:256].encode()
        best = max(_scores(key, cands), key=lambda item: (item[0], item[1]))
        return next(r for r in replicas if r.name == best[1])

    return pick


def round_robin() -> Picker:
    counter = iter(range(10**12))
    return lambda _req, _blocks, replicas: replicas[next(counter) % len(replicas)]


def oracle(_req: Request, blocks: list[int], replicas: list[Replica]) -> Replica:
    return max(replicas, key=lambda r: (r.cached_tokens(blocks), -r.in_flight))


def simulate(requests: list[Request], picker: Picker, replicas_n: int, capacity_tokens: int,
             rate: float, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    replicas = [Replica(f"r{i}", capacity_tokens // BLOCK) for i in range(replicas_n)]
    ends: list[tuple[float, int]] = []  # (finish time, replica index)
    now = 0.0
    prompt = cached = 0
    for req in requests:
        now += rng.expovariate(rate)
        while ends and ends[0][0] <= now:
            _, i = heapq.heappop(ends)
            replicas[i].in_flight -= 1
        blocks = block_ids(req.tokens)
        r = picker(req, blocks, replicas)
        hit = r.cached_tokens(blocks)
        prompt += len(req.tokens)
        cached += hit
        r.admit(blocks)
        r.in_flight += 1
        r.served += 1
        # prefill of what is not cached (~5,000 tok/s) + decode (~40 tok/s per sequence)
        duration = (len(req.tokens) - hit) / 5000 + req.answer_tokens / 40
        heapq.heappush(ends, (now + duration, replicas.index(r)))
    served = [r.served for r in replicas]
    mean = sum(served) / len(served)
    return {"hit_ratio": cached / prompt, "max_over_mean": max(served) / mean}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--sessions", type=int, default=300)
    ap.add_argument("--turns", type=int, default=8, help="at most, per session")
    ap.add_argument("--systems", type=int, default=12, help="distinct system prompts")
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--hot", type=float, default=0.8, help="hot phase: the share of sessions on one prompt")
    ap.add_argument("--cache-tokens", type=int, default=60_000, help="per replica")
    ap.add_argument("--rate", type=float, default=8.0, help="requests per second")
    ap.add_argument("--system-chars", type=int, default=1000,
                    help="characters of each system prompt's text (the key takes the first 256 of system + first user)")
    ap.add_argument("--min-match", type=float, default=DEFAULT_MIN_MATCH, help="cache_aware's min_match")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    strategies: dict[str, Callable[[], Picker]] = {
        "round_robin": round_robin,
        "least_in_flight": lambda: selector_picker("least_in_flight"),
        "prefix_hash before": lambda: unbounded_hash(old_key=True),
        "rendezvous, no bound": lambda: unbounded_hash(old_key=False),
        "prefix_hash": lambda: selector_picker("prefix_hash"),
        "cache_aware": lambda: selector_picker("cache_aware", args.min_match),
        "oracle": lambda: oracle,
    }
    phases = {"zipf": None, "hot prefix": args.hot}
    results: dict[str, dict[str, dict[str, float]]] = {}
    for phase, hot in phases.items():
        reqs = workload(random.Random(args.seed), args.sessions, args.turns, args.systems, args.zipf, hot,
                        args.system_chars)
        results[phase] = {
            name: simulate(reqs, make(), args.replicas, args.cache_tokens, args.rate, args.seed)
            for name, make in strategies.items()
        }
        print(f"\n{phase}: {len(reqs)} requests, {args.replicas} replicas, "
              f"{args.cache_tokens} cached tokens each, {args.rate}/s")
        best = results[phase]["oracle"]["hit_ratio"]
        print(f"  {'strategy':<26}{'hit ratio':>10}{'of oracle':>11}{'max/mean':>10}")
        for name, row in results[phase].items():
            print(f"  {name:<26}{row['hit_ratio']:>10.3f}{row['hit_ratio'] / best:>11.0%}{row['max_over_mean']:>10.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_bytes(orjson.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results},
                                           option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
