"""SGLang's PD protocol, as its gateway (sgl-router's PD router) speaks it.

The router picks a prefill and a decode replica and adds three fields to the
client's body: `bootstrap_host` (the prefill replica's host), `bootstrap_port`
(its bootstrap server's port, `--disaggregation-bootstrap-port`; null for
the server's default) and `bootstrap_room` (a random integer in [0, 2^63-1]
naming this transfer). The same body goes to both replicas at once: the
decode replica joins the room on the prefill replica's bootstrap server and
receives the KV cache from it. The client gets the decode replica's answer;
the prefill replica's is read to its end and dropped. A request that
generates several sequences (`n` > 1, or a batch of prompts) gets a list of
each field, one per sequence.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ..core.backend import BackendSpec

ROOM_BITS = 63


def _batch(body: dict[str, Any]) -> int | None:
    n = body.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and n > 1:
        return n
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and not all(isinstance(t, int) for t in prompt):
        return len(prompt)  # a list of prompts (a list of token ids is one prompt)
    return None


class _SGLang:
    name = "sglang"
    concurrent = True

    def prefill_body(self, body: dict[str, Any], prefill: BackendSpec, room: int) -> dict[str, Any]:
        out = dict(body)
        host = urlsplit(prefill.url).hostname or ""
        size = _batch(body)
        if size is None:
            out["bootstrap_host"] = host
            out["bootstrap_port"] = prefill.bootstrap_port
            out["bootstrap_room"] = room
        else:  # one room per sequence, derived from the request's one
            mask = (1 << ROOM_BITS) - 1
            out["bootstrap_host"] = [host] * size
            out["bootstrap_port"] = [prefill.bootstrap_port] * size
            out["bootstrap_room"] = [(room + i) & mask for i in range(size)]
        return out

    def decode_body(self, body: dict[str, Any], prefill: BackendSpec, room: int, answer: Any) -> dict[str, Any]:
        return self.prefill_body(body, prefill, room)

    def handoff(self, answer: Any) -> str | None:
        return None


SGLANG = _SGLang()
