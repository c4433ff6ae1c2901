"""Choose ONE backend among the candidates of a model group. Pure and fast.

`Selector.pick()` filters, in order: drained by an operator, excluded names,
not `usable(now)`, at its upstream quota (`limited_until`), weight <= 0, no
capacity left; then keeps only the lowest `priority` value that still has a
candidate (so a full preferred tier spills to the next one), and lets the
strategy choose within that tier.

Strategies:
- `weighted_round_robin`: nginx's smooth WRR; state per group, tolerant of the
  candidate set changing between calls.
- `least_latency`: lowest expected latency, `ewma_ms * (in_flight + 1)` (plain
  lowest EWMA when idle; the in-flight factor stops a burst from herding onto
  the one fastest backend, whose EWMA only moves when requests finish).
  Unmeasured backends go first, so they get measured.
- `least_in_flight`: lowest `in_flight / weight`.
- `prefix_hash`: consistent hashing with bounded loads. Weighted rendezvous
  (HRW) hashing of a prompt-prefix key, blake2b keyed by backend NAME, orders
  the candidates the same way on every node with no coordination (adding a
  backend moves only its fair share of keys); the key goes to the first in
  that order whose in-flight count, with this request, stays within
  ceil(load_factor × (in-flight of the tier + 1) × its weight share). So a
  prefix sticks to one backend (and its prompt cache) until that backend
  carries more than `load_factor` × its share, then walks on to the next.
  Without a key it falls back to smooth WRR.
- `cache_aware`: the replica that holds the longest leading part of the
  prompt, by this process's `PrefixIndex` of what it sent where (core/kvindex:
  chained block hashes, bounded), among those within the same load bound as
  `prefix_hash`; when none holds at least `min_match` of the prompt's blocks
  (or none of those has room), the `prefix_hash` ring decides. Every pick
  records its blocks under the replica picked.
Load, for `least_in_flight`, `prefix_hash` and `cache_aware`: the larger of
this process's in-flight count and the running + waiting requests the
backend itself last reported (`BackendState.load`; the health probe reads
vLLM's, SGLang's and llama.cpp's /metrics), so traffic from other nodes and
clients counts too.
Exact ties are broken by weighted random with the injected `random.Random`.
"""

from __future__ import annotations

import hashlib
import math
import operator
import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from .backend import BackendSpec
from .health import BackendState
from .kvindex import PrefixIndex

WEIGHTED_ROUND_ROBIN = "weighted_round_robin"
LEAST_LATENCY = "least_latency"
LEAST_IN_FLIGHT = "least_in_flight"
PREFIX_HASH = "prefix_hash"
CACHE_AWARE = "cache_aware"
STRATEGIES: frozenset[str] = frozenset(
    {WEIGHTED_ROUND_ROBIN, LEAST_LATENCY, LEAST_IN_FLIGHT, PREFIX_HASH, CACHE_AWARE}
)
KEYED: frozenset[str] = frozenset({PREFIX_HASH, CACHE_AWARE})  # strategies that read a prefix key
DEFAULT_STRATEGY = WEIGHTED_ROUND_ROBIN
PREFIX_CHARS = 256
DEFAULT_LOAD_FACTOR = 1.25  # prefix_hash: a backend takes up to 1.25 × its share of the in-flight load
DEFAULT_MIN_MATCH = 0.5  # cache_aware: a replica must hold half the prompt's blocks to be chosen for them

_TWO_64 = float(2**64)


@dataclass(frozen=True, slots=True)
class Candidate:
    spec: BackendSpec
    state: BackendState


def _eligible(
    candidates: Sequence[Candidate], now: float, exclude: Collection[str]
) -> list[Candidate]:
    """The lowest-priority-value tier of candidates that can take a request."""
    pool: list[Candidate] = []
    best = 0
    for c in candidates:
        spec = c.spec
        if spec.weight <= 0 or spec.drained or (exclude and spec.name in exclude):
            continue
        state = c.state
        if not state.usable(now) or state.limited_until > now:
            continue
        cap = spec.capacity
        if cap is not None and state.in_flight >= cap:
            continue
        prio = spec.priority
        if not pool or prio < best:
            best = prio
            pool = [c]
        elif prio == best:
            pool.append(c)
    return pool


def all_at_capacity(
    candidates: Sequence[Candidate], now: float, exclude: Collection[str] = ()
) -> bool:
    """Some candidate is usable but every usable one is full: queue, don't fail."""
    seen = False
    for c in candidates:
        spec = c.spec
        if (spec.weight <= 0 or spec.drained or spec.name in exclude or not c.state.usable(now)
                or c.state.limited_until > now):
            continue
        if spec.capacity is None or c.state.in_flight < spec.capacity:
            return False
        seen = True
    return seen


class Selector:
    """One per process and strategy; holds the smooth-WRR counters and, for
    `cache_aware`, the process's prefix index (owned by the runtime)."""

    __slots__ = ("_decision", "_index", "_load_factor", "_matched", "_min_match", "_rng", "_strategy", "_swrr")

    def __init__(
        self,
        strategy: str,
        rng: random.Random | None = None,
        *,
        load_factor: float = DEFAULT_LOAD_FACTOR,
        index: PrefixIndex | None = None,
        min_match: float = DEFAULT_MIN_MATCH,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(
                f"Unknown selection strategy {strategy!r}; "
                f"expected one of {sorted(STRATEGIES)}"
            )
        if not load_factor >= 1.0:
            raise ValueError(f"load_factor must be at least 1.0, not {load_factor!r}")
        if not 0.0 < min_match <= 1.0:
            raise ValueError(f"min_match must be in (0, 1], not {min_match!r}")
        self._strategy = strategy
        self._load_factor = load_factor
        self._min_match = min_match
        self._index = index if index is not None else (PrefixIndex() if strategy == CACHE_AWARE else None)
        self._rng = rng if rng is not None else random.Random()
        self._swrr: dict[str, dict[str, int]] = {}
        self._decision: str | None = None
        self._matched = 0

    @property
    def strategy(self) -> str:
        return self._strategy

    @property
    def decision(self) -> str | None:
        """What decided the last keyed pick: "cached" (`cache_aware`: the
        replica holding the longest part of the prompt), "owner" (the key's
        own backend on the ring), "spill" (past it, because it was past its
        load bound), or None (no key, or another strategy). Read it right
        after `pick()`, before anything else can pick (no await between)."""
        return self._decision

    @property
    def matched(self) -> int:
        """`cache_aware`: how many leading blocks of the prompt the replica of
        the last pick held by the index (0 when the ring decided)."""
        return self._matched

    @property
    def load_factor(self) -> float:
        return self._load_factor

    @property
    def min_match(self) -> float:
        return self._min_match

    @property
    def index(self) -> PrefixIndex | None:
        return self._index

    def forget(self, group: str) -> None:
        """Drop the WRR counters of a group that no longer exists."""
        self._swrr.pop(group, None)

    def pick(
        self,
        group: str,
        candidates: Sequence[Candidate],
        *,
        now: float,
        prefix_key: bytes | None = None,
        blocks: tuple[int, ...] = (),
        exclude: Collection[str] = (),
    ) -> Candidate | None:
        pool = _eligible(candidates, now, exclude)
        if not pool:
            return None
        strategy = self._strategy
        if strategy == WEIGHTED_ROUND_ROBIN:
            return self._swrr_pick(group, candidates, pool)
        self._decision = None
        self._matched = 0
        if strategy == CACHE_AWARE:
            picked = self._cache_aware(group, candidates, pool, prefix_key, blocks, now)
            if blocks:
                assert self._index is not None
                self._index.insert(blocks, picked.spec.name)
            return picked
        if len(pool) == 1:
            return pool[0]
        if strategy == LEAST_LATENCY:
            return self._least_latency(pool, now)
        if strategy == LEAST_IN_FLIGHT:
            return self._least_in_flight(pool, now)
        if prefix_key is None:
            return self._swrr_pick(group, candidates, pool)
        picked, spilled = _bounded(prefix_key, pool, self._load_factor, now)
        self._decision = "spill" if spilled else "owner"
        return picked

    # -- strategies ----------------------------------------------------------

    def _swrr_pick(
        self, group: str, candidates: Sequence[Candidate], pool: list[Candidate]
    ) -> Candidate:
        current = self._swrr.get(group)
        if current is None:
            current = self._swrr[group] = {}
        elif len(current) > len(candidates):
            # Names vanished from the group: forget their counters. Counters
            # of candidates merely filtered out this time are kept.
            alive = {c.spec.name for c in candidates}
            for name in [n for n in current if n not in alive]:
                del current[name]
        total = 0
        best = pool[0]
        best_weight = -(2**62)
        for c in pool:
            name = c.spec.name
            weight = c.spec.weight
            cw = current.get(name, 0) + weight
            current[name] = cw
            total += weight
            if cw > best_weight:
                best = c
                best_weight = cw
        current[best.spec.name] = best_weight - total
        return best

    def _least_latency(self, pool: list[Candidate], now: float) -> Candidate:
        unmeasured: list[Candidate] = []
        ties: list[Candidate] = []
        best = math.inf
        for c in pool:
            state = c.state
            ewma = state.ewma_ms
            if ewma is None:
                unmeasured.append(c)
                continue
            cost = ewma * (state.in_flight + 1)
            if cost < best:
                best = cost
                ties = [c]
            elif cost == best:
                ties.append(c)
        if unmeasured:
            return self._least_in_flight(unmeasured, now)
        return ties[0] if len(ties) == 1 else self._weighted_random(ties)

    def _least_in_flight(self, pool: list[Candidate], now: float) -> Candidate:
        # Compare load/weight by cross-multiplying: exact, no floats.
        ties: list[Candidate] = []
        best_n = 0
        best_w = 1
        for c in pool:
            state = c.state
            n = state.in_flight
            if state.reported > n and state.reported_until > now:
                n = state.reported
            w = c.spec.weight
            if not ties or n * best_w < best_n * w:
                best_n, best_w = n, w
                ties = [c]
            elif n * best_w == best_n * w:
                ties.append(c)
        return ties[0] if len(ties) == 1 else self._weighted_random(ties)

    def _cache_aware(
        self, group: str, candidates: Sequence[Candidate], pool: list[Candidate],
        key: bytes | None, blocks: tuple[int, ...], now: float,
    ) -> Candidate:
        """The replica holding the longest leading run of `blocks` within its
        load bound (ties: the least loaded, then the ring's order); the ring
        when none holds `min_match` of them."""
        if len(pool) == 1:
            return pool[0]
        if blocks:
            assert self._index is not None
            held = self._index.match(blocks)
            if held and max(held.values()) >= self._min_match * len(blocks):
                load, total_weight = _tier_load(pool, now)
                best: Candidate | None = None
                best_depth = 0
                best_load = 0
                for c in pool:
                    depth = held.get(c.spec.name, 0)
                    if depth < best_depth or depth == 0:
                        continue
                    n = _load(c.state, now)
                    if depth == best_depth and n >= best_load:
                        continue
                    if _room(c, n, load, total_weight, self._load_factor):
                        best, best_depth, best_load = c, depth, n
                if best is not None and best_depth >= self._min_match * len(blocks):
                    self._decision = "cached"
                    self._matched = best_depth
                    return best
        if key is None:
            return self._swrr_pick(group, candidates, pool)
        picked, spilled = _bounded(key, pool, self._load_factor, now)
        self._decision = "spill" if spilled else "owner"
        return picked

    def _weighted_random(self, pool: list[Candidate]) -> Candidate:
        total = 0
        for c in pool:
            total += c.spec.weight
        r = self._rng.random() * total
        for c in pool:
            r -= c.spec.weight
            if r < 0:
                return c
        return pool[-1]


_M64 = (1 << 64) - 1
_name_hashes: dict[str, int] = {}


def _name_hash(name: str) -> int:
    """A backend name's 64-bit hash (blake2b: the same in every process and
    on every node), kept once computed (a few hundred thousand names at most
    before the table starts over)."""
    h = _name_hashes.get(name)
    if h is None:
        if len(_name_hashes) >= 200_000:
            _name_hashes.clear()
        h = _name_hashes[name] = int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "big")
    return h


def _mix(x: int) -> int:
    """splitmix64's finaliser: every bit of `x` moves every bit of the result."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


# Higher score first; an exact tie (never seen with 64-bit hashes) goes to
# the higher name, the same on every node.
_ORDER = operator.itemgetter(0, 1)


def _scores(key: bytes, pool: list[Candidate]) -> list[tuple[float, str, Candidate]]:
    """Weighted HRW score of each candidate for `key`: -weight / ln(u), with
    u the mix of the key's and the name's 64-bit hashes mapped into (0, 1).
    Highest first is the key's order. One keyed hash per candidate was ~1 µs
    each (2.3 ms a pick at 2,000 backends); the mix of two cached ints is a
    few integer operations."""
    k = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
    log = math.log
    out = []
    for c in pool:
        spec = c.spec
        name = spec.name
        h = _name_hashes.get(name)
        if h is None:
            h = _name_hash(name)
        u = (_mix(k ^ h) + 0.5) / _TWO_64
        out.append((-spec.weight / log(u), name, c))
    return out


def _load(state: BackendState, now: float) -> int:
    """A backend's load: this process's in-flight count, or what the backend
    last reported running and waiting when that is more (and still fresh)."""
    n = state.in_flight
    if state.reported > n and state.reported_until > now:
        return state.reported
    return n


def _tier_load(pool: list[Candidate], now: float) -> tuple[int, int]:
    """(total load, total weight) of a tier."""
    load = 0
    total_weight = 0
    for c in pool:
        load += _load(c.state, now)
        total_weight += c.spec.weight
    return load, total_weight


def _room(c: Candidate, own: int, load: int, total_weight: int, factor: float) -> bool:
    """Whether `c`, carrying `own`, stays within its bound with one more
    request: own + 1 <= ceil(factor × (load + 1) × weight / total weight),
    `load` being the tier's. Some candidate always has room: the bounds sum
    to at least factor × (load + 1) > load."""
    bound = math.ceil(factor * (load + 1) * c.spec.weight / total_weight - 1e-9)
    return own + 1 <= bound


def _bounded(key: bytes, pool: list[Candidate], factor: float, now: float) -> tuple[Candidate, bool]:
    """Consistent hashing with bounded loads: the first candidate in the key's
    HRW order that has room (`_room`), and whether that is not the key's own
    backend (a spill). The usual case, the key's own backend has room, is one
    pass that scores and sums the load together; only a spill sorts."""
    k = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
    log = math.log
    top = pool[0]
    top_score = -math.inf
    top_name = ""
    top_load = load = total_weight = 0
    for c in pool:
        spec, state = c.spec, c.state
        n = state.in_flight
        if state.reported > n and state.reported_until > now:
            n = state.reported
        load += n
        weight = spec.weight
        total_weight += weight
        name = spec.name
        h = _name_hashes.get(name)
        if h is None:
            h = _name_hash(name)
        score = -weight / log((_mix(k ^ h) + 0.5) / _TWO_64)
        if score > top_score or (score == top_score and name > top_name):
            top, top_score, top_name, top_load = c, score, name, n
    if _room(top, top_load, load, total_weight, factor):
        return top, False
    for _, _, c in sorted(_scores(key, pool), key=_ORDER, reverse=True):
        if _room(c, _load(c.state, now), load, total_weight, factor):
            return c, True
    return top, False  # unreachable (see _room); the key's own backend


# -- prefix keys -----------------------------------------------------------


def _text(content: object) -> str:
    """Text of a message content: a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
        return "".join(parts)
    return ""


def _from_messages(messages: list[object]) -> tuple[str, str]:
    """(leading system/developer text, first user text) of a message list."""
    system: list[str] = []
    user = ""
    leading = True
    for msg in messages:
        if not isinstance(msg, Mapping):
            continue
        role = msg.get("role")
        if leading and role in ("system", "developer"):
            system.append(_text(msg.get("content")))
            continue
        leading = False
        if role == "user":
            user = _text(msg.get("content"))
            break
    return "\n".join(system), user


def _messages_text(items: list[object], out: list[str]) -> None:
    for msg in items:
        if isinstance(msg, Mapping):
            role = msg.get("role")
            out.append(f"{role if isinstance(role, str) else ''}\x1f{_text(msg.get('content', msg.get('output')))}\x1e")
        elif isinstance(msg, str):
            out.append(msg)


def prompt_text(body: Mapping[str, object], limit: int) -> str:
    """The prompt as one string in the order a chat template lays it out (the
    Responses `instructions`, tool names, then every message as role and
    text; or the completion `prompt` / Responses `input`), cut at `limit`
    characters: what `cache_aware` cuts into blocks. Never raises on a
    malformed body."""
    out: list[str] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str):
        out.append(instructions + "\x1e")
    tools = body.get("tools")
    if isinstance(tools, list):
        for tool in tools:
            if isinstance(tool, Mapping):
                fn = tool.get("function", tool)
                name = fn.get("name") if isinstance(fn, Mapping) else None
                if isinstance(name, str):
                    out.append(name + "\x1f")
    messages = body.get("messages")
    if isinstance(messages, list):
        _messages_text(messages, out)
    else:
        source = body.get("prompt", body.get("input"))
        if isinstance(source, str):
            out.append(source)
        elif isinstance(source, list) and source:
            first = source[0]
            if isinstance(first, int):  # a token-id prompt
                out.append(",".join(str(t) for t in source[: limit // 2]))
            elif isinstance(first, list):  # a batch of token-id prompts: the first
                out.append(",".join(str(t) for t in first[: limit // 2]))
            else:
                _messages_text(source, out)
    text = "".join(out)
    return text[:limit]


def prefix_key(body: Mapping[str, object], limit: int = PREFIX_CHARS) -> bytes | None:
    """A stable key from the start of the prompt, or None if there is none.

    Up to `limit` characters of the leading system/developer messages (or the
    Responses `instructions`), then up to `limit` characters of the first user
    message, `prompt` or `input`: each part capped on its own, so that
    conversations sharing a long system prompt still differ by their first
    turn (each keeps its own backend, while the shared system prompt is
    cached everywhere), and later turns never change the key. Never raises on
    a malformed body.
    """
    system = ""
    user = ""
    messages = body.get("messages")
    if isinstance(messages, list):
        system, user = _from_messages(messages)
    else:
        instructions = body.get("instructions")
        if isinstance(instructions, str):
            system = instructions
        source = body.get("prompt", body.get("input"))
        if isinstance(source, str):
            user = source
        elif isinstance(source, list) and source:
            first = source[0]
            if isinstance(first, str):
                user = first
            elif isinstance(first, int):  # a token-id prompt
                user = ",".join(str(t) for t in source[:limit])
            elif isinstance(first, list):  # a batch of token-id prompts
                user = ",".join(str(t) for t in first[:limit])
            else:  # Responses input items, shaped like messages
                s, user = _from_messages(source)
                system = f"{system}\n{s}" if system and s else system or s
    if not system and not user:
        return None
    text = f"{system[:limit]}\x00{user[:limit]}" if system else user[:limit]
    return text.encode("utf-8")
