"""The fake backend's prompt cache and load, as vLLM reports them.

vLLM keeps prompt KV in fixed-size blocks (16 tokens by default), each named
by a hash chained over the blocks before it; a new prompt reuses its longest
leading run of cached blocks and reports it as
`usage.prompt_tokens_details.cached_tokens` (at most the prompt length less
one: the last token is always computed). Its `/metrics` publishes, in the
Prometheus text format, the requests running and waiting, the KV-cache usage
(0..1) and the prefix-cache queries and hits (tokens). This module does the
same over whitespace words (the fakes' tokens), with an LRU of a fixed number
of blocks, so that a router's cache-aware routing meets a backend whose
cache really fills, evicts and reports.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

BLOCK_TOKENS = 16


class PromptCache:
    def __init__(self, capacity_blocks: int = 4096) -> None:
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self._lock = threading.Lock()
        self.queries = 0  # prompt tokens looked up
        self.hits = 0  # of which served from the cache
        self.running = 0  # requests being answered now

    def serve(self, words: list[str]) -> int:
        """Look a prompt up and cache it; the tokens reused."""
        names = []
        h = 0
        for i in range(0, len(words) - len(words) % BLOCK_TOKENS, BLOCK_TOKENS):
            h = hash((h, tuple(words[i : i + BLOCK_TOKENS])))
            names.append(h)
        with self._lock:
            held = 0
            for name in names:
                if name not in self._blocks:
                    break
                held += 1
            for name in names:
                self._blocks[name] = None
                self._blocks.move_to_end(name)
            while len(self._blocks) > self.capacity_blocks:
                self._blocks.popitem(last=False)
            cached = min(held * BLOCK_TOKENS, max(len(words) - 1, 0))
            self.queries += len(words)
            self.hits += cached
        return cached

    def clear(self) -> None:
        """A restart: the cache is gone (and vLLM's counters start over)."""
        with self._lock:
            self._blocks.clear()
            self.queries = self.hits = 0

    def metrics(self, model: str, waiting: int = 0, extra_running: int = 0) -> bytes:
        """vLLM's /metrics (the gauges and counters a router reads)."""
        name = model.replace('"', "")
        label = f'{{model_name="{name}"}}'
        usage = len(self._blocks) / self.capacity_blocks if self.capacity_blocks else 0.0
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{label} {float(self.running + extra_running)}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{label} {float(waiting)}",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{label} {usage}",
            "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.",
            "# TYPE vllm:prefix_cache_queries_total counter",
            f"vllm:prefix_cache_queries_total{label} {float(self.queries)}",
            "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.",
            "# TYPE vllm:prefix_cache_hits_total counter",
            f"vllm:prefix_cache_hits_total{label} {float(self.hits)}",
        ]
        return ("\n".join(lines) + "\n").encode()
