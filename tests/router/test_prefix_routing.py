"""prefix_hash end to end: two router processes send a prompt prefix to the
same backend, a session header pins a conversation whatever its prompts, and
the `prefix_hash` section is read from the YAML."""

from __future__ import annotations

import httpx

from tests.support.answers import answered_by
from tests.support.routerproc import wait_until

NAMES = ("a", "b", "c", "d")


def _config(backends, extra: str = "") -> str:
    rows = "".join(f"  - {{name: {n}, url: '{b.url}', models: [m]}}\n" for n, b in backends)
    return f"selection_strategy: prefix_hash\nhealth: {{enabled: false}}\n{extra}backends:\n{rows}"


def _chat(url: str, system: str, user: str, headers: dict[str, str] | None = None) -> str | None:
    body = {"model": "m", "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    return answered_by(httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=30))


def test_two_routers_send_each_prefix_to_the_same_backend(openai_backends, router_factory):
    backends = list(zip(NAMES, openai_backends(*NAMES), strict=True))
    one, two = router_factory(_config(backends)), router_factory(_config(backends[::-1]))
    chosen = {}
    for i in range(24):
        system = f"You are assistant number {i}."
        first = _chat(one.url, system, "hello")
        assert first is not None
        # the same prefix, a later turn of the conversation, on the other node
        assert _chat(two.url, system, "hello") == first
        assert _chat(one.url, system, "hello") == first
        chosen[system] = first
    assert len(set(chosen.values())) >= 3  # prefixes spread over the backends
    # one at a time, every pick was the key's own backend (counted as the
    # observations drain, a moment after each answer)
    def counted() -> str:
        text = httpx.get(one.url + "/metrics", timeout=10).text
        return text if 'router_prefix_decisions_total{decision="owner"} 48.0' in text else ""

    metrics = wait_until(counted, 30, what="48 owner decisions in /metrics")
    assert 'decision="spill"' not in metrics


def test_a_session_header_pins_a_conversation(openai_backends, router_factory):
    backends = list(zip(NAMES, openai_backends(*NAMES), strict=True))
    router = router_factory(_config(backends, "prefix_hash: {session_header: X-Conversation}\n"))
    for session in ("s-1", "s-2", "s-3"):
        seen = {_chat(router.url, f"prompt {i}", f"turn {i}", {"x-conversation": session}) for i in range(8)}
        assert len(seen) == 1 and None not in seen, (session, seen)
    unpinned = {_chat(router.url, f"prompt {i}", f"turn {i}") for i in range(16)}
    assert len(unpinned) >= 2  # without the header, the prompts decide
