"""Disaggregated prefill/decode: a request's prompt prefilled on one replica,
its tokens decoded on another (docs/disaggregation.md).

A model listed under `disaggregation` names the protocol its replicas speak;
each protocol is one entry of `PROTOCOLS` (a module beside this one) saying
how the two legs' bodies are made and whether the legs run one after the
other (vLLM's `kv_transfer_params` handshake) or at once (SGLang's
bootstrap room). `flow.py` runs the legs; the pipeline calls it and falls
back to a unified (`both`) replica when the two-leg path cannot answer.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import sglang, vllm
from .protocol import Protocol

# The endpoints served in two legs; any other endpoint of a disaggregated
# model goes to a `both` replica (unified).
ENDPOINTS = frozenset({"chat/completions", "completions"})

# The response header every /v1 answer of a disaggregated model carries.
HEADER = "x-routing-path"
PREFILL_THEN_DECODE = "prefill_then_decode"
UNIFIED = "unified"
FALLBACK = "fallback"

PROTOCOLS: Mapping[str, Protocol] = {"vllm": vllm.VLLM, "sglang": sglang.SGLANG}

__all__ = ["ENDPOINTS", "FALLBACK", "HEADER", "PREFILL_THEN_DECODE", "PROTOCOLS", "UNIFIED", "Protocol"]
