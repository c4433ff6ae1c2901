"""Selection of one backend: filters, priority tiers and the four strategies."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.core.backend import BackendSpec
from router.core.health import BackendState
from router.core.selection import (
    STRATEGIES,
    Candidate,
    Selector,
    all_at_capacity,
    prefix_key,
)

NOW = 1000.0


def cand(
    name: str,
    weight: int = 100,
    *,
    capacity: int | None = None,
    priority: int = 0,
    in_flight: int = 0,
    ewma: float | None = None,
    healthy: bool = True,
) -> Candidate:
    spec = BackendSpec(
        name=name,
        url=f"http://{name}",
        models=("m",),
        weight=weight,
        capacity=capacity,
        priority=priority,
    )
    state = BackendState(in_flight=in_flight, ewma_ms=ewma, probe_healthy=healthy)
    return Candidate(spec, state)


def picks(sel: Selector, cands: list[Candidate], n: int, **kw: object) -> list[str]:
    out = []
    for _ in range(n):
        c = sel.pick("m", cands, now=NOW, **kw)  # type: ignore[arg-type]
        assert c is not None
        out.append(c.spec.name)
    return out


def test_strategy_names() -> None:
    """The five strategy names are exactly the documented ones."""
    assert STRATEGIES == {
        "weighted_round_robin",
        "least_latency",
        "least_in_flight",
        "prefix_hash",
        "cache_aware",
    }


def test_unknown_strategy_fails_loudly() -> None:
    """A typo in the configured strategy is an error, not a silent default."""
    with pytest.raises(ValueError, match="round_robin"):
        Selector("round_robin")


# -- filters and tiers ------------------------------------------------------


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_none_when_no_candidate(strategy: str) -> None:
    """An empty or fully filtered candidate list yields None."""
    sel = Selector(strategy, random.Random(1))
    assert sel.pick("m", [], now=NOW) is None
    assert sel.pick("m", [cand("a", healthy=False)], now=NOW, prefix_key=b"k") is None


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_weight_zero_is_never_selected(strategy: str) -> None:
    """A route with weight 0 is never selected."""
    sel = Selector(strategy, random.Random(2))
    cands = [cand("zero", 0), cand("one", 1)]
    for i in range(200):
        c = sel.pick("m", cands, now=NOW, prefix_key=str(i).encode())
        assert c is not None and c.spec.name == "one"
    assert sel.pick("m", [cand("zero", 0)], now=NOW) is None


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_excluded_unusable_and_full_backends_are_skipped(strategy: str) -> None:
    """Excluded names, probe-unhealthy, breaker-open and full backends never win."""
    open_breaker = cand("open")
    open_breaker.state.open_until = NOW + 5
    cands = [
        cand("excluded", 1000),
        cand("sick", 1000, healthy=False),
        open_breaker,
        cand("full", 1000, capacity=2, in_flight=2),
        cand("ok", 1),
    ]
    sel = Selector(strategy, random.Random(3))
    for i in range(100):
        c = sel.pick("m", cands, now=NOW, prefix_key=b"%d" % i, exclude={"excluded"})
        assert c is not None and c.spec.name == "ok"


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_a_drained_backend_is_never_selected(strategy: str) -> None:
    """A drained backend is never picked, whatever its weight, priority or
    prefix; with only drained backends there is no pick, and nothing to
    queue for (a drained backend's capacity is not waited on)."""
    drained = cand("drained", 1000, priority=-1)
    drained = Candidate(replace(drained.spec, drained=True), drained.state)
    cands = [drained, cand("ok", 1)]
    sel = Selector(strategy, random.Random(6))
    for i in range(200):
        c = sel.pick("m", cands, now=NOW, prefix_key=b"%d" % i, blocks=(i, i + 1))
        assert c is not None and c.spec.name == "ok"
    assert sel.pick("m", [drained], now=NOW, prefix_key=b"k") is None
    full = Candidate(replace(drained.spec, capacity=1), BackendState(in_flight=1))
    assert not all_at_capacity([full], NOW)


def test_breaker_half_open_candidate_is_eligible_after_cooldown() -> None:
    """Once its cooldown has passed, an open backend is selectable again."""
    b = cand("a")
    b.state.open_until = NOW
    assert Selector("least_in_flight").pick("m", [b], now=NOW) is b


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_lowest_priority_value_tier_wins(strategy: str) -> None:
    """Priority 0 backends take all traffic while any of them can."""
    cands = [cand("p1", 1000, priority=1), cand("p0a", 1), cand("p0b", 1)]
    sel = Selector(strategy, random.Random(4))
    got = set()
    for i in range(200):
        c = sel.pick("m", cands, now=NOW, prefix_key=b"%d" % i)
        assert c is not None
        got.add(c.spec.name)
    assert got == {"p0a", "p0b"}


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_full_preferred_tier_spills_to_next_tier(strategy: str) -> None:
    """When every priority-0 backend is at capacity, priority 1 serves."""
    cands = [
        cand("p0", capacity=1, in_flight=1),
        cand("p2", priority=2),
        cand("p1", priority=1),
    ]
    sel = Selector(strategy, random.Random(5))
    c = sel.pick("m", cands, now=NOW, prefix_key=b"x")
    assert c is not None and c.spec.name == "p1"


def test_capacity_admits_until_full() -> None:
    """A backend with capacity N is eligible while fewer than N are in flight."""
    c = cand("a", capacity=2, in_flight=1)
    sel = Selector("weighted_round_robin")
    assert sel.pick("m", [c], now=NOW) is c
    c.state.on_start()
    assert sel.pick("m", [c], now=NOW) is None


def test_all_at_capacity_only_when_usable_ones_are_all_full() -> None:
    """Queue when usable backends exist but all are full; not when none usable."""
    full = cand("full", capacity=1, in_flight=1)
    assert all_at_capacity([full, cand("sick", healthy=False)], NOW)
    assert not all_at_capacity([full, cand("free", capacity=3, in_flight=2)], NOW)
    assert not all_at_capacity([full, cand("unlimited", in_flight=99)], NOW)
    assert not all_at_capacity([cand("sick", healthy=False)], NOW)
    assert not all_at_capacity([], NOW)
    assert not all_at_capacity([full], NOW, exclude={"full"})
    assert not all_at_capacity([cand("w0", 0, capacity=1, in_flight=1)], NOW)


# -- smooth weighted round robin ----------------------------------------------


def test_swrr_exact_nginx_sequence_for_5_1_1() -> None:
    """Weights 5,1,1 give nginx's smooth order a a b a c a a, then repeat."""
    cands = [cand("a", 5), cand("b", 1), cand("c", 1)]
    sel = Selector("weighted_round_robin")
    assert "".join(picks(sel, cands, 14)) == "aabacaa" * 2


def test_swrr_distribution_follows_weights() -> None:
    """Over 10k picks 100/300/600 weights give 10%/30%/60% exactly."""
    cands = [cand("a", 100), cand("b", 300), cand("c", 600)]
    counts = Counter(picks(Selector("weighted_round_robin"), cands, 10_000))
    assert counts == {"a": 1000, "b": 3000, "c": 6000}


def test_swrr_state_is_per_group() -> None:
    """Each group (model) runs its own smooth sequence."""
    cands = [cand("a", 5), cand("b", 1), cand("c", 1)]
    sel = Selector("weighted_round_robin")
    seq = []
    for _ in range(7):
        for group in ("m1", "m2"):
            c = sel.pick(group, cands, now=NOW)
            assert c is not None
            seq.append(c.spec.name)
    assert "".join(seq[0::2]) == "".join(seq[1::2]) == "aabacaa"


def test_swrr_tolerates_candidate_set_changes() -> None:
    """Backends come and go; vanished counters are dropped, weights still hold."""
    sel = Selector("weighted_round_robin")
    picks(sel, [cand("a"), cand("b"), cand("gone", 1000)], 7)
    cands = [cand("a", 100), cand("b", 300)]
    counts = Counter(picks(sel, cands, 4000))
    assert counts["a"] == pytest.approx(1000, abs=5)
    assert counts["b"] == pytest.approx(3000, abs=5)
    assert "gone" not in sel._swrr["m"]


def test_swrr_skips_temporarily_full_backend_without_losing_balance() -> None:
    """A backend that is full for a while is skipped, then rejoins the rotation."""
    a, b = cand("a"), cand("b", capacity=1)
    sel = Selector("weighted_round_robin")
    b.state.in_flight = 1
    assert picks(sel, [a, b], 3) == ["a", "a", "a"]
    b.state.in_flight = 0
    counts = Counter(picks(sel, [a, b], 100))
    assert counts == {"a": 50, "b": 50}


# -- least latency ------------------------------------------------------------


def test_least_latency_prefers_the_fastest() -> None:
    """With all measured and idle, the lowest EWMA wins every time."""
    cands = [cand("slow", ewma=300.0), cand("fast", ewma=80.0), cand("mid", ewma=120)]
    sel = Selector("least_latency", random.Random(6))
    assert set(picks(sel, cands, 50)) == {"fast"}


def test_least_latency_explores_unmeasured_first() -> None:
    """A backend with no EWMA yet is tried before measured ones."""
    cands = [cand("fast", ewma=1.0), cand("new")]
    sel = Selector("least_latency", random.Random(7))
    assert picks(sel, cands, 5) == ["new"] * 5


def test_least_latency_spreads_burst_over_unmeasured() -> None:
    """Among unmeasured backends the least loaded goes first."""
    cands = [cand("n1", in_flight=3), cand("n2", in_flight=1), cand("old", ewma=1.0)]
    sel = Selector("least_latency", random.Random(8))
    assert picks(sel, cands, 3) == ["n2"] * 3


def test_least_latency_accounts_for_in_flight_load() -> None:
    """Expected latency is ewma * (in_flight + 1): a busy fast one can lose."""
    fast = cand("fast", ewma=100.0, in_flight=2)  # cost 300
    slow = cand("slow", ewma=200.0)  # cost 200
    sel = Selector("least_latency", random.Random(9))
    assert picks(sel, [fast, slow], 3) == ["slow"] * 3


def test_least_latency_ties_use_weighted_random() -> None:
    """Equal EWMAs split traffic by weight."""
    cands = [cand("a", 100, ewma=50.0), cand("b", 300, ewma=50.0)]
    counts = Counter(picks(Selector("least_latency", random.Random(10)), cands, 4000))
    assert counts["b"] / 4000 == pytest.approx(0.75, abs=0.03)


# -- least in flight ------------------------------------------------------------


def test_least_in_flight_uses_in_flight_per_weight() -> None:
    """Lowest in_flight / weight wins: 4/400 beats 2/100."""
    cands = [cand("a", 100, in_flight=2), cand("b", 400, in_flight=4)]
    sel = Selector("least_in_flight", random.Random(11))
    assert picks(sel, cands, 3) == ["b"] * 3


def test_least_in_flight_balances_as_requests_start() -> None:
    """Starting each picked request keeps loads proportional to weights."""
    cands = [cand("a", 100), cand("b", 200), cand("c", 100)]
    sel = Selector("least_in_flight", random.Random(12))
    for _ in range(40):
        c = sel.pick("m", cands, now=NOW)
        assert c is not None
        c.state.on_start()
    assert [c.state.in_flight for c in cands] == [10, 20, 10]


def test_least_in_flight_ties_use_weighted_random() -> None:
    """Idle backends split by weight."""
    cands = [cand("a", 100), cand("b", 900)]
    counts = Counter(picks(Selector("least_in_flight", random.Random(13)), cands, 5000))
    assert counts["b"] / 5000 == pytest.approx(0.9, abs=0.02)


# -- prefix hash ----------------------------------------------------------------


def names(n: int) -> list[Candidate]:
    return [cand(f"replica-{i}") for i in range(n)]


def hashed(sel: Selector, cands: list[Candidate], key: bytes) -> str:
    c = sel.pick("m", cands, now=NOW, prefix_key=key)
    assert c is not None
    return c.spec.name


def test_prefix_hash_same_key_same_backend_on_independent_nodes() -> None:
    """Two selectors with differently ordered candidates agree on every key."""
    a, b = Selector("prefix_hash", random.Random(1)), Selector("prefix_hash")
    cands = names(5)
    shuffled = cands[::-1]
    for i in range(500):
        key = f"system prompt {i}".encode()
        assert hashed(a, cands, key) == hashed(b, shuffled, key)
        assert hashed(a, cands, key) == hashed(a, cands, key)


def test_prefix_hash_adding_a_backend_moves_only_its_share() -> None:
    """Going from 4 to 5 backends moves ~1/5 of keys, all onto the new one."""
    sel = Selector("prefix_hash")
    four, five = names(4), names(5)
    keys = [f"key-{i}".encode() for i in range(10_000)]
    moved = 0
    for key in keys:
        before, after = hashed(sel, four, key), hashed(sel, five, key)
        if before != after:
            moved += 1
            assert after == "replica-4"
    assert 0.10 < moved / len(keys) < 0.30


def test_prefix_hash_respects_weights() -> None:
    """Key share follows weight: 100/300/600 -> ~10/30/60%."""
    cands = [cand("a", 100), cand("b", 300), cand("c", 600)]
    sel = Selector("prefix_hash")
    counts = Counter(hashed(sel, cands, f"k{i}".encode()) for i in range(10_000))
    assert counts["a"] / 10_000 == pytest.approx(0.1, abs=0.02)
    assert counts["b"] / 10_000 == pytest.approx(0.3, abs=0.02)
    assert counts["c"] / 10_000 == pytest.approx(0.6, abs=0.02)


def test_prefix_hash_full_owner_spills_to_another_backend() -> None:
    """When a key's backend is full, the key goes to a consistent second choice."""
    cands = names(4)
    sel = Selector("prefix_hash")
    owner = hashed(sel, cands, b"hot")
    full = [
        cand(c.spec.name, capacity=1, in_flight=1) if c.spec.name == owner else c
        for c in cands
    ]
    second = hashed(sel, full, b"hot")
    assert second != owner
    assert hashed(Selector("prefix_hash"), full[::-1], b"hot") == second


def test_prefix_hash_without_key_falls_back_to_swrr() -> None:
    """No prefix key means smooth weighted round robin."""
    cands = [cand("a", 5), cand("b", 1), cand("c", 1)]
    assert "".join(picks(Selector("prefix_hash"), cands, 7)) == "aabacaa"


def test_prefix_hash_long_backend_names_work() -> None:
    """Names longer than a blake2b key (64 bytes) still hash."""
    cands = [cand("x" * 100), cand("y" * 100)]
    assert hashed(Selector("prefix_hash"), cands, b"k") in {"x" * 100, "y" * 100}


# -- prefix keys ----------------------------------------------------------------


def test_prefix_key_chat_uses_system_then_first_user() -> None:
    """Chat key: leading system message then the first user message."""
    body = {
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi"},
            {"role": "user", "content": "Later turn"},
        ]
    }
    assert prefix_key(body) == b"You are terse.\x00Hello"


def test_prefix_key_same_conversation_prefix_same_key() -> None:
    """Later turns of one conversation keep the key (same prefix, same replica)."""
    first = {"messages": [{"role": "user", "content": "Q1"}]}
    later = {
        "messages": [
            {"role": "user", "content": "Q1"},
            {"role": "assistant", "content": "A1"},
            {"role": "user", "content": "Q2"},
        ]
    }
    assert prefix_key(first) == prefix_key(later) == b"Q1"


def test_prefix_key_reads_text_parts() -> None:
    """List contents contribute their text parts; images are ignored."""
    body = {
        "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "sys"}]},
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:..."}},
                    {"type": "text", "text": "what is"},
                    {"type": "text", "text": " this"},
                ],
            },
        ]
    }
    assert prefix_key(body) == b"sys\x00what is this"


def test_prefix_key_completions_prompt() -> None:
    """Completions key: the prompt string, or the first of a list."""
    assert prefix_key({"prompt": "Once upon"}) == b"Once upon"
    assert prefix_key({"prompt": ["first", "second"]}) == b"first"
    assert prefix_key({"prompt": [1, 2, 3]}) == b"1,2,3"


def test_prefix_key_responses_input() -> None:
    """Responses key: instructions then the input string or first user item."""
    assert prefix_key({"instructions": "be nice", "input": "hi"}) == b"be nice\x00hi"
    body = {
        "input": [
            {"role": "system", "content": "sys"},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "hello"}],
            },
        ]
    }
    assert prefix_key(body) == b"sys\x00hello"


def test_prefix_key_is_truncated() -> None:
    """Only the first `limit` characters count, so long prompts stay cheap."""
    key = prefix_key({"prompt": "é" * 1000})
    assert key == ("é" * 256).encode()
    assert prefix_key({"prompt": "abcdef"}, limit=3) == b"abc"


def test_prefix_key_tells_conversations_under_one_long_system_prompt_apart() -> None:
    """A system prompt longer than the limit does not hide the first turn:
    two conversations under it get two keys, each its own across turns."""
    system = {"role": "system", "content": "You are a careful assistant. " * 40}

    def body(*turns: str) -> dict[str, object]:
        return {"messages": [system, *({"role": "user", "content": t} for t in turns)]}

    assert prefix_key(body("plan a trip")) != prefix_key(body("fix my code"))
    assert prefix_key(body("plan a trip")) == prefix_key(body("plan a trip", "to Jeju"))
    assert len(prefix_key(body("x" * 1000)) or b"") == 256 + 1 + 256


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"messages": []},
        {"messages": "nope"},
        {"messages": [None, {"role": "assistant", "content": "x"}]},
        {"prompt": None},
        {"prompt": []},
        {"input": [{"type": "function_call_output", "output": "x"}]},
        {"messages": [{"role": "user", "content": {"weird": True}}]},
    ],
)
def test_prefix_key_is_none_without_prompt_text(body: dict[str, object]) -> None:
    """Bodies without usable prompt text give None and never raise."""
    assert prefix_key(body) is None


# -- prefix_hash: consistent hashing with bounded loads ---------------------------

weights_st = st.lists(st.integers(min_value=1, max_value=500), min_size=2, max_size=12)


def hrw_order(key: bytes, cands: list[Candidate]) -> list[str]:
    """The key's order over all backends, read off the selector itself: the
    backend it picks when everything is idle, then the one it picks once that
    one is excluded, and so on."""
    order: list[str] = []
    sel = Selector("prefix_hash")
    while len(order) < len(cands):
        c = sel.pick("m", cands, now=NOW, prefix_key=key, exclude=order)
        assert c is not None
        order.append(c.spec.name)
    return order


def bound(c: Candidate, cands: list[Candidate], factor: float) -> int:
    load = sum(x.state.in_flight for x in cands)
    share = c.spec.weight / sum(x.spec.weight for x in cands)
    return math.ceil(factor * (load + 1) * share - 1e-9)


@settings(max_examples=300, deadline=None)
@given(weights_st, st.lists(st.integers(0, 40), min_size=12, max_size=12), st.binary(min_size=1, max_size=40),
       st.sampled_from([1.0, 1.1, 1.25, 1.5, 2.0]))
def test_prefix_hash_picks_the_first_backend_in_the_keys_order_with_room(weights, loads, key, factor) -> None:
    """The pick is the first backend in the key's HRW order whose in-flight
    count stays within its bound with this request; the key's own backend
    whenever it has room."""
    cands = [cand(f"b{i}", w, in_flight=loads[i]) for i, w in enumerate(weights)]
    picked = hashed(Selector("prefix_hash", load_factor=factor), cands, key)
    by_name = {c.spec.name: c for c in cands}
    order = hrw_order(key, [cand(c.spec.name, c.spec.weight) for c in cands])
    with_room = [n for n in order if by_name[n].state.in_flight + 1 <= bound(by_name[n], cands, factor)]
    assert with_room, "the bounds sum past the load: someone always has room"
    assert picked == with_room[0]


@settings(max_examples=150, deadline=None)
@given(weights_st, st.lists(st.integers(0, 3), min_size=1, max_size=300), st.sampled_from([1.0, 1.25, 2.0]))
def test_prefix_hash_never_lets_a_backend_past_its_bound(weights, keys, factor) -> None:
    """Requests arriving one after another (none finishing), most of them on
    a few hot prefixes: after every pick each backend carries at most
    ceil(factor × its share of the load so far), however skewed the keys."""
    sel = Selector("prefix_hash", load_factor=factor)
    names_ = [f"b{i}" for i in range(len(weights))]
    load = dict.fromkeys(names_, 0)
    total_weight = sum(weights)
    for n, k in enumerate(keys, start=1):
        cands = [cand(name, w, in_flight=load[name]) for name, w in zip(names_, weights, strict=True)]
        load[hashed(sel, cands, f"hot-{k}".encode())] += 1
        for name, w in zip(names_, weights, strict=True):
            assert load[name] <= math.ceil(factor * n * w / total_weight - 1e-9), (name, load, n)


def test_prefix_hash_keeps_a_prefix_on_its_backend_while_it_has_room() -> None:
    """Idle or evenly loaded, every request of a prefix goes to one backend;
    once that backend carries more than its bound the next one takes over,
    the same one on every node."""
    cands = names(4)
    owner = hashed(Selector("prefix_hash"), cands, b"system prompt")
    assert {hashed(Selector("prefix_hash"), cands, b"system prompt") for _ in range(20)} == {owner}
    even = [cand(c.spec.name, in_flight=5) for c in cands]  # load 20: bound ceil(1.25 × 21 / 4) = 7
    assert hashed(Selector("prefix_hash"), even, b"system prompt") == owner
    # owner at 8 of 23: with this request 9 > ceil(1.25 × 24 / 4) = 8
    hot = [cand(c.spec.name, in_flight=8 if c.spec.name == owner else 5) for c in cands]
    spilled = hashed(Selector("prefix_hash"), hot, b"system prompt")
    assert spilled != owner
    assert hashed(Selector("prefix_hash", random.Random(7)), hot[::-1], b"system prompt") == spilled
    assert spilled == hrw_order(b"system prompt", cands)[1]


def test_prefix_hash_a_larger_load_factor_keeps_prefixes_longer() -> None:
    cands = names(4)
    owner = hashed(Selector("prefix_hash"), cands, b"p")
    hot = [cand(c.spec.name, in_flight=9 if c.spec.name == owner else 3) for c in cands]  # owner at 9 of 18
    assert hashed(Selector("prefix_hash"), hot, b"p") != owner  # bound ceil(1.25 × 19 / 4) = 6
    assert hashed(Selector("prefix_hash", load_factor=2.0), hot, b"p") == owner  # bound 10


def test_decision_says_whether_the_last_pick_passed_the_keys_own_backend() -> None:
    cands = names(4)
    sel = Selector("prefix_hash")
    owner = hashed(sel, cands, b"system prompt")
    assert sel.decision == "owner"
    hot = [cand(c.spec.name, in_flight=8 if c.spec.name == owner else 5) for c in cands]
    assert hashed(sel, hot, b"system prompt") != owner and sel.decision == "spill"
    assert hashed(sel, cands, b"system prompt") == owner and sel.decision == "owner"
    hashed(sel, hot, b"system prompt")
    assert picks(sel, cands, 1) and sel.decision is None  # no key: smooth WRR, no decision


def test_a_backends_reported_load_counts_while_fresh() -> None:
    """A backend busy with other clients' requests (its /metrics says 9
    running) is as loaded as if this process had sent them, until the report
    goes stale."""
    a, b = cand("a"), cand("b")
    a.state.reported, a.state.reported_until = 9, NOW + 5
    assert {Selector("least_in_flight").pick("m", [a, b], now=NOW).spec.name for _ in range(20)} == {"b"}
    owner = hashed(Selector("prefix_hash"), [cand("a"), cand("b")], b"k")
    for c in (a, b):
        c.state.reported, c.state.reported_until = (9, NOW + 5) if c.spec.name == owner else (0, 0.0)
    assert hashed(Selector("prefix_hash"), [a, b], b"k") != owner
    a.state.reported_until = b.state.reported_until = NOW - 1  # stale: own counts only
    assert hashed(Selector("prefix_hash"), [a, b], b"k") == owner


def test_load_factor_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="load_factor"):
        Selector("prefix_hash", load_factor=0.9)
