"""What a model server says about its own load, read from its Prometheus text.

vLLM, SGLang and llama.cpp's server publish their scheduler's state on
`GET /metrics` (llama.cpp with `--metrics`, SGLang with `--enable-metrics`):

| | running | waiting | KV-cache usage (0..1) | prefix cache |
|---|---|---|---|---|
| vLLM | `vllm:num_requests_running` | `vllm:num_requests_waiting` | `vllm:kv_cache_usage_perc` (before V1: `vllm:gpu_cache_usage_perc`) | `vllm:prefix_cache_queries_total`, `vllm:prefix_cache_hits_total` (tokens) |
| SGLang | `sglang:num_running_reqs` | `sglang:num_queue_reqs` | `sglang:token_usage` | `sglang:cache_hit_rate` |
| llama.cpp | `llamacpp:requests_processing` | `llamacpp:requests_deferred` | `llamacpp:kv_cache_usage_ratio` | – |

A server with several engines or models publishes one sample per label set;
the counts are summed, the usage is the highest. A text with neither a
running nor a waiting count is no report (None): that server publishes no
load, and the router keeps using only its own in-flight counts.
"""

from __future__ import annotations

from dataclasses import dataclass

_RUNNING = frozenset({"vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing"})
_WAITING = frozenset({"vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred"})
_KV = frozenset({
    "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage", "llamacpp:kv_cache_usage_ratio",
})
_QUERIES = frozenset({"vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"})
_HITS = frozenset({"vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"})
_HIT_RATE = "sglang:cache_hit_rate"
_WANTED = _RUNNING | _WAITING | _KV | _QUERIES | _HITS | {_HIT_RATE}
MAX_TEXT = 4 * 1024 * 1024  # a /metrics text larger than this is not read


@dataclass(frozen=True, slots=True)
class LoadReport:
    running: int
    waiting: int
    kv_usage: float | None = None
    # The prefix cache: cumulative tokens looked up and found (vLLM), or the
    # server's own hit rate (SGLang); None when it publishes neither.
    cache_queries: float | None = None
    cache_hits: float | None = None
    cache_hit_rate: float | None = None

    @property
    def load(self) -> int:
        return self.running + self.waiting


def parse(text: bytes) -> LoadReport | None:
    """The load in a Prometheus text exposition, or None if it has none."""
    if len(text) > MAX_TEXT:
        return None
    sums: dict[str, float] = {}
    highest: dict[str, float] = {}
    for raw in text.splitlines():
        if not raw or raw[0] == 35:  # b"#": HELP, TYPE, comments
            continue
        line = raw.decode("utf-8", "replace")
        brace = line.find("{")
        space = line.find(" ")
        if space < 0:
            continue
        end = brace if 0 <= brace < space else space
        name = line[:end]
        if name not in _WANTED:
            continue
        rest = line[line.rfind("}") + 1 :] if 0 <= brace < space else line[space:]
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if value != value or value < 0:  # NaN or negative: not a count
            continue
        sums[name] = sums.get(name, 0.0) + value
        highest[name] = max(highest.get(name, 0.0), value)
    running = [sums[n] for n in _RUNNING if n in sums]
    waiting = [sums[n] for n in _WAITING if n in sums]
    if not running and not waiting:
        return None
    kv = [highest[n] for n in _KV if n in highest]
    queries = [sums[n] for n in _QUERIES if n in sums]
    hits = [sums[n] for n in _HITS if n in sums]
    return LoadReport(
        running=int(sum(running)),
        waiting=int(sum(waiting)),
        kv_usage=min(max(kv), 1.0) if kv else None,
        cache_queries=queries[0] if queries else None,
        cache_hits=hits[0] if hits else None,
        cache_hit_rate=highest.get(_HIT_RATE),
    )
