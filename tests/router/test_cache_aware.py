"""cache_aware and the backends' own load, end to end: a real router process
(and its tasks process where the probe matters) in front of fake vLLM-like
backends whose prompt caches really fill, report `cached_tokens` and publish
vLLM's /metrics (fakes/kvcache.py)."""

from __future__ import annotations

import re

import httpx

from tests.support.answers import answered_by
from tests.support.routerproc import wait_until

NAMES = ("a", "b", "c", "d")
SYSTEM = "You answer questions about the fleet. " + " ".join(f"rule{i} applies." for i in range(200))


def _config(backends, strategy: str = "cache_aware", health: str = "{enabled: false}") -> str:
    rows = "".join(f"  - {{name: {n}, url: '{b.url}', models: [m]}}\n" for n, b in backends)
    return f"selection_strategy: {strategy}\nhealth: {health}\nbackends:\n{rows}"


class Conversation:
    """A chat that grows by one user turn and its answer each time."""

    def __init__(self, url: str, opening: str) -> None:
        self.url = url
        self.messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": opening}]

    def turn(self, text: str | None = None) -> tuple[str | None, int]:
        """(the backend that answered, the prompt tokens it served from its cache)."""
        if text is not None:
            self.messages.append({"role": "user", "content": text})
        r = httpx.post(self.url + "/v1/chat/completions", json={"model": "m", "messages": self.messages}, timeout=30)
        assert r.status_code == 200, r.text
        body = r.json()
        self.messages.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
        return answered_by(r), body["usage"]["prompt_tokens_details"]["cached_tokens"]


def _decisions(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    return {m[1]: float(m[2]) for m in re.finditer(r'router_prefix_decisions_total\{decision="(\w+)"\} ([\d.]+)', text)}


def test_a_conversation_stays_where_its_prompt_is_cached(openai_backends, router_factory):
    backends = list(zip(NAMES, openai_backends(*NAMES), strict=True))
    router = router_factory(_config(backends))
    talks = [Conversation(router.url, f"Conversation {i} starts with its own question {i}.") for i in range(3)]
    for turn in range(4):
        for i, talk in enumerate(talks):
            backend, cached = talk.turn(None if turn == 0 else f"And then turn {turn} of conversation {i}?")
            if turn == 0:
                talk.backend = backend  # type: ignore[attr-defined]
            else:
                assert backend == talk.backend, (i, turn)  # type: ignore[attr-defined]
                assert cached > 0  # the backend served the conversation so far from its cache
    # every turn after the first of the first conversation found a holder in the index
    counts = wait_until(lambda: (d := _decisions(router.url)) and sum(d.values()) == 12 and d, 30, what="12 decisions")
    assert counts.get("cached", 0) >= 11
    status = router.status()
    assert status["strategy"] == "cache_aware"
    assert status["prefix_index"]["entries"] > 0
    ratios = [b["prompt_cache_hit_ratio"] for b in status["backends"] if b["prompt_cache_hit_ratio"] is not None]
    assert ratios and max(ratios) > 0.5
    metrics = httpx.get(router.url + "/metrics", timeout=10).text
    assert re.search(r'router_cached_tokens_total\{backend="[abcd]",model="m"\} [1-9]', metrics)
    dashboard = router.staff_session()  # the operator sees the same on the Backends page
    page = dashboard.get("/dashboard/backends/").text
    dashboard.close()
    assert re.search(r"cached [1-9]\d* %", page)
    assert re.search(r"cache_aware prompt index of this process: [1-9]\d* of at most", page)


def test_a_backend_that_lost_its_cache_stops_being_its_holder(openai_backends, router_factory):
    """The backend restarts (its prompt cache is gone); the index still names
    it for the conversation, but its answer reports no cached tokens, so the
    index drops it and the next turn is decided by the ring again."""
    servers = openai_backends(*NAMES)
    router = router_factory(_config(list(zip(NAMES, servers, strict=True))))
    talk = Conversation(router.url, "A question that starts one conversation.")
    first, _ = talk.turn()
    assert talk.turn("A second turn.")[0] == first
    holder = servers[NAMES.index(first)]
    holder.stop()
    holder.start()  # a fresh process: an empty cache
    backend, cached = talk.turn("A third turn, after the restart.")
    assert (backend, cached) == (first, 0)
    talk.turn("A fourth turn.")
    counts = wait_until(lambda: (d := _decisions(router.url)) and sum(d.values()) == 4 and d, 30, what="4 decisions")
    assert counts.get("cached") == 2.0  # turns two and three
    assert counts.get("owner", 0) + counts.get("spill", 0) == 2.0  # turns one and four: the ring


def test_the_load_a_backend_reports_steers_least_in_flight(openai_backends, router_factory):
    """The tasks process reads each backend's /metrics; a backend busy with
    other clients' requests gets none of ours while its report is fresh, and
    one that publishes nothing is served as before."""
    a, b = openai_backends("a", "b")
    a.behavior.extra_running = 40  # 40 requests of other clients running on a
    health = "{interval: 0.5, load_interval: 0.5}"
    router = router_factory(_config([("a", a), ("b", b)], "least_in_flight", health), tasks=True)

    def reported() -> bool:
        rows = {row["name"]: row for row in router.status()["backends"]}
        return rows["a"]["reported_load"] == 40 and rows["b"]["reported_load"] in (0, None)  # (idle: no state kept)

    wait_until(reported, 60, interval=0.2, what="both backends' load reports")
    dashboard = router.staff_session()
    page = dashboard.get("/dashboard/backends/").text
    assert "backend: 40</span>" in page and "its KV cache 0 % full" in page
    dashboard.close()
    with httpx.Client(base_url=router.url, timeout=30) as http:
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        assert {answered_by(http.post("/v1/chat/completions", json=chat)) for _ in range(8)} == {"b"}
        a.behavior.metrics = False  # a stops publishing: its last report goes stale, then only our counts
        wait_until(lambda: {row["name"]: row for row in router.status()["backends"]}["a"]["reported_load"] is None,
                   60, interval=0.2, what="a's report to go stale")
        seen = {answered_by(http.post("/v1/chat/completions", json=chat)) for _ in range(8)}
    assert seen == {"a", "b"}


def test_a_restarted_backend_leaves_the_index(openai_backends, router_factory):
    """The prefix-cache counters a backend publishes go backwards when it
    restarts: the tasks process says so, and every web process forgets what
    that backend held."""
    servers = openai_backends("a", "b")
    health = "{interval: 0.5, load_interval: 0.5}"
    router = router_factory(_config(list(zip(("a", "b"), servers, strict=True)), health=health), tasks=True)
    talk = Conversation(router.url, "One conversation, held by one backend.")
    first, _ = talk.turn()
    talk.turn("More.")
    wait_until(lambda: router.status()["prefix_index"]["replicas"] == 1, 30, what="the index to hold one replica")
    holder = servers[("a", "b").index(first)]
    # the tasks process must have read its counters once after the turns (its
    # KV cache no longer empty) before the restart
    wait_until(lambda: ({r["name"]: r for r in router.status()["backends"]}[first]["kv_usage"] or 0) > 0,
               60, interval=0.2, what="a load report after the turns")
    holder.stop()
    holder.start()
    wait_until(lambda: router.status()["prefix_index"]["replicas"] == 0, 60, interval=0.2,
               what="the restarted backend to leave the index")
