"""The prefix index of `cache_aware` (router/core/kvindex.py) and the strategy
that reads it (router/core/selection.py): what a replica holds, the bound on
memory, forgetting, and the choice it makes."""

from __future__ import annotations

import random
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from router.core.backend import BackendSpec
from router.core.health import BackendState
from router.core.kvindex import BYTES_PER_ENTRY, HOLDERS, PrefixIndex, chain
from router.core.selection import Candidate, Selector, prompt_text

NOW = 1000.0
BLOCK = 8


def blocks(text: str, seed: int = 1) -> tuple[int, ...]:
    return chain(seed, text, BLOCK, 10_000)


def cand(name: str, in_flight: int = 0, weight: int = 1) -> Candidate:
    return Candidate(BackendSpec(name=name, url="http://x", models=("m",), weight=weight), BackendState(in_flight=in_flight))


# -- chain -------------------------------------------------------------------


def test_a_growing_prompt_keeps_its_leading_block_names() -> None:
    first = blocks("system: be brief. user: hello there")
    longer = blocks("system: be brief. user: hello there, and more turns after it")
    assert len(first) == 4  # 35 characters: four full blocks, the partial fifth left out
    assert longer[: len(first)] == first
    assert blocks("system: be BRIEF. user: hello there")[0] == first[0]
    assert blocks("system: be BRIEF. user: hello there")[1:] != first[1:]  # chained: a change names every later block anew
    assert blocks("short") == ()
    assert blocks("system: be brief.", seed=2) != blocks("system: be brief.")  # groups are seeded apart


def test_prompt_text_lays_out_every_front_doors_prompt() -> None:
    chat = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": [{"type": "text", "text": "U"}]}],
            "tools": [{"type": "function", "function": {"name": "lookup"}}]}
    assert prompt_text(chat, 1000) == "lookup\x1fsystem\x1fS\x1euser\x1fU\x1e"
    assert prompt_text({"prompt": "once upon"}, 1000) == "once upon"
    assert prompt_text({"prompt": [1, 2, 3]}, 1000) == "1,2,3"
    assert prompt_text({"instructions": "I", "input": "hi"}, 1000) == "I\x1ehi"
    assert prompt_text({"input": [{"role": "user", "content": "hi"}]}, 1000) == "user\x1fhi\x1e"
    assert prompt_text({"messages": [{"role": "user", "content": "x" * 50}]}, 20) == "user\x1f" + "x" * 15
    assert prompt_text({"messages": "not a list", "prompt": None}, 100) == ""


# -- the index -----------------------------------------------------------------


def test_match_is_each_replicas_leading_run() -> None:
    index = PrefixIndex(1000)
    conv = blocks("system prompt shared by all; turn one of a; turn two of a")
    other = blocks("system prompt shared by all; turn one of b")
    index.insert(conv[:3], "r1")
    index.insert(conv, "r2")
    index.insert(other, "r3")
    assert index.match(conv) == {"r1": 3, "r2": len(conv), "r3": 5}  # the two share 41 characters: 5 blocks
    assert index.match(blocks("nothing like it at all, at all")) == {}


def test_a_block_keeps_its_newest_holders_only() -> None:
    index = PrefixIndex(1000)
    b = blocks("a prompt all replicas were sent")
    for i in range(HOLDERS + 3):
        index.insert(b, f"r{i}")
    assert set(index.match(b)) == {f"r{i}" for i in range(3, HOLDERS + 3)}


def test_forgetting_a_replica_kills_its_entries_even_when_it_returns() -> None:
    index = PrefixIndex(1000)
    b = blocks("the system prompt of everyone")
    index.insert(b, "r1")
    index.insert(b, "r2")
    index.forget("r1")
    assert index.match(b) == {"r2": len(b)}
    index.insert(blocks("something else entirely, r1"), "r1")  # back, with a new epoch
    assert index.match(b) == {"r2": len(b)}
    index.retain({"r1"})
    assert index.match(b) == {} and index.replicas() == 1


def test_clear_forgets_everything_and_the_index_fills_again() -> None:
    """An operator's purge: nothing matches, nothing is held; a replica sent
    the same prompt afterwards holds it anew."""
    index = PrefixIndex(1000)
    b = blocks("the system prompt of everyone")
    index.insert(b, "r1")
    index.insert(blocks("another prompt altogether"), "r2")
    index.clear()
    assert (len(index), index.replicas(), index.match(b)) == (0, 0, {})
    index.insert(b, "r1")
    assert index.match(b) == {"r1": len(b)} and index.replicas() == 1


def test_drop_removes_a_replica_from_one_prompts_blocks() -> None:
    index = PrefixIndex(1000)
    mine = blocks("the prompt r1 turned out not to hold")
    kept = blocks("another prompt r1 really holds still")
    index.insert(mine, "r1")
    index.insert(mine, "r2")
    index.insert(kept, "r1")
    index.drop(mine, "r1")
    assert index.match(mine) == {"r2": len(mine)}
    assert index.match(kept) == {"r1": len(kept)}


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 300), st.lists(st.tuples(st.integers(0, 50), st.integers(1, 40), st.integers(0, 5)), max_size=400))
def test_the_index_never_holds_more_than_its_bound(max_entries: int, workload: list[tuple[int, int, int]]) -> None:
    index = PrefixIndex(max_entries)
    for prompt, length, replica in workload:
        index.insert(blocks(f"{prompt}:" + "x" * (length * BLOCK)), f"r{replica}")
        assert len(index) <= max_entries


def test_an_entry_costs_what_the_docs_say() -> None:
    index = PrefixIndex(1_000_000)
    prompts = [blocks(f"prompt {i} " + "y" * 400) for i in range(2000)]
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i, b in enumerate(prompts):
        index.insert(b, f"replica-{i % 8}")
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert len(index) > 90_000
    assert grown / len(index) <= BYTES_PER_ENTRY


# -- the strategy ------------------------------------------------------------------


def sel(**kw: object) -> Selector:
    return Selector("cache_aware", random.Random(1), index=PrefixIndex(10_000), **kw)  # type: ignore[arg-type]


def pick(s: Selector, cands: list[Candidate], text: str, key: bytes | None = b"key") -> str:
    c = s.pick("m", cands, now=NOW, prefix_key=key, blocks=blocks(text))
    assert c is not None
    return c.spec.name


def test_a_conversation_follows_the_replica_that_holds_it() -> None:
    s = sel()
    cands = [cand(f"r{i}") for i in range(4)]
    turn = "system prompt; user turn one"
    first = pick(s, cands, turn, key=b"k1")
    assert s.decision in ("owner", "spill") and s.matched == 0  # nothing held yet: the ring decides
    for i in range(5):
        turn += f"; answer {i}; next turn {i}"
        assert pick(s, cands, turn, key=b"another key each time " + bytes([i])) == first
        assert s.decision == "cached" and s.matched >= len(blocks(turn)) // 2


def test_too_short_a_match_leaves_it_to_the_ring() -> None:
    s = sel(min_match=0.9)
    cands = [cand(f"r{i}") for i in range(4)]
    held_by = pick(s, cands, "a shared beginning!", key=b"k")
    ring = Selector("prefix_hash").pick("m", cands, now=NOW, prefix_key=b"other")
    assert ring is not None
    assert pick(s, cands, "a shared beginning! then a long, different rest of prompt", key=b"other") == ring.spec.name
    assert s.decision == "owner" and (ring.spec.name != held_by or s.matched == 0)


def test_a_replica_past_its_bound_loses_its_prefix_to_the_next_holder() -> None:
    s = sel()
    text = "the hot system prompt everyone sends, and a turn"
    cands = [cand(f"r{i}") for i in range(4)]
    owner = pick(s, cands, text)
    second = pick(s, [c for c in cands if c.spec.name != owner], text)  # r-second holds it too
    loaded = [cand(c.spec.name, in_flight=9 if c.spec.name == owner else 1) for c in cands]
    assert pick(s, loaded, text) == second and s.decision == "cached"


def test_unhealthy_replicas_are_never_chosen_for_what_they_hold() -> None:
    s = sel()
    text = "a prompt whose holder goes down afterwards"
    cands = [cand(f"r{i}") for i in range(3)]
    holder = pick(s, cands, text)
    for c in cands:
        c.state.probe_healthy = c.spec.name != holder
    assert pick(s, cands, text) != holder


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=4, max_size=4), st.lists(st.integers(0, 12), min_size=4, max_size=4),
       st.lists(st.integers(0, 5), min_size=1, max_size=60))
def test_cache_aware_never_puts_a_replica_past_its_bound(weights, loads, prompts) -> None:
    """The bounded-load invariant holds for what the index decides too: a
    pick never takes a replica past ceil(1.25 × (load + 1) × its share)."""
    s = sel()
    cands = [cand(f"r{i}", in_flight=n, weight=w) for i, (w, n) in enumerate(zip(weights, loads, strict=True))]
    total_weight = sum(weights)
    for p in prompts:
        load = sum(c.state.in_flight for c in cands)
        c = s.pick("m", cands, now=NOW, prefix_key=b"%d" % p, blocks=blocks(f"prompt number {p} " * 4))
        assert c is not None
        bound = -(-1.25 * (load + 1) * c.spec.weight // total_weight)
        assert c.state.in_flight + 1 <= bound
        c.state.in_flight += 1


def test_two_processes_make_the_same_first_choice() -> None:
    """Before either has learned anything, both follow the ring: a prefix
    reaches one replica from every process."""
    cands = [cand(f"r{i}") for i in range(5)]
    text = "system prompt shared across the fleet; hello"
    assert pick(sel(), cands, text, key=b"k") == pick(sel(), list(reversed(cands)), text, key=b"k")
