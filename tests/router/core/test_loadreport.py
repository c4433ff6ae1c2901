"""Reading a model server's own load from its /metrics text (router/core/loadreport.py)."""

from __future__ import annotations

from fakes.kvcache import PromptCache
from router.core.loadreport import MAX_TEXT, parse

VLLM = b"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama"} 3.0
vllm:num_requests_running{engine="1",model_name="llama"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 7.0
vllm:num_requests_waiting{engine="1",model_name="llama"} 0.0
vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="llama"} 0.75
vllm:prefix_cache_queries_total{engine="0",model_name="llama"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="llama"} 600.0
vllm:num_requests_running_bogus 99
"""

SGLANG = b"""# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.28
sglang:cache_hit_rate{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0075
"""

LLAMA_CPP = b"""# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 33065
llamacpp:requests_processing 1
llamacpp:requests_deferred 2 1733000000000
"""


def test_vllm_engines_are_summed_and_the_fullest_cache_counts() -> None:
    report = parse(VLLM)
    assert report is not None
    assert (report.running, report.waiting, report.load) == (5, 7, 12)
    assert report.kv_usage == 0.75
    assert (report.cache_queries, report.cache_hits) == (1000.0, 600.0)


def test_sglang_and_llama_cpp_names_and_a_timestamp() -> None:
    sglang = parse(SGLANG)
    assert sglang is not None and (sglang.load, sglang.kv_usage, sglang.cache_hit_rate) == (5, 0.28, 0.0075)
    llama = parse(LLAMA_CPP)
    assert llama is not None and (llama.running, llama.waiting, llama.kv_usage) == (1, 2, None)


def test_no_load_in_the_text_is_no_report() -> None:
    assert parse(b"# HELP x\nprocess_cpu_seconds_total 12.5\n") is None
    assert parse(b"<html>not found</html>") is None
    assert parse(b"") is None
    assert parse(b"vllm:num_requests_running{a=\"b\"} NaN\nvllm:num_requests_running -3\n") is None
    assert parse(b"vllm:num_requests_running 1\n" + b"#" * MAX_TEXT) is None  # too large to read


def test_the_fake_backend_speaks_what_the_parser_reads() -> None:
    cache = PromptCache(capacity_blocks=10)
    cache.serve(("word " * 40).split())
    cache.running = 2
    report = parse(cache.metrics("demo", waiting=3, extra_running=1))
    assert report is not None
    assert (report.running, report.waiting, report.kv_usage) == (3, 3, 0.2)
    assert (report.cache_queries, report.cache_hits) == (40.0, 0.0)
