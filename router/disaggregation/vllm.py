"""vLLM's KV-connector handshake (NixlConnector and the connectors that
share its `kv_transfer_params`), as vLLM's own disaggregated proxy speaks it.

1. The prefill replica gets the client's request, non-streaming, limited to
   one token, with `kv_transfer_params` asking it to keep the KV blocks for
   a remote decode (`do_remote_decode: true`).
2. Its JSON answer carries `kv_transfer_params` naming those blocks
   (`do_remote_prefill: true`, `remote_engine_id`, `remote_block_ids`,
   `remote_host`, `remote_port`, …).
3. The decode replica gets the client's request as it came (streaming if
   the client streams) with those `kv_transfer_params`: it pulls the blocks
   and generates. A prefill replica frees the blocks once one decode read
   them (or after its abort timeout), so the parameters serve one decode.
"""

from __future__ import annotations

from typing import Any

from ..core.backend import BackendSpec

# What the prefill leg asks for: keep the KV blocks for a remote decode.
_REMOTE_DECODE = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}
# Sampling floors a one-token prefill cannot honour (vLLM's proxy drops them there).
_NOT_FOR_PREFILL = ("min_tokens", "min_completion_tokens", "stream_options")


class _VLLM:
    name = "vllm"
    concurrent = False

    def prefill_body(self, body: dict[str, Any], prefill: BackendSpec, room: int) -> dict[str, Any]:
        out = {k: v for k, v in body.items() if k not in _NOT_FOR_PREFILL}
        out["kv_transfer_params"] = dict(_REMOTE_DECODE)
        out["stream"] = False
        out["max_tokens"] = 1
        if "max_completion_tokens" in out:
            out["max_completion_tokens"] = 1
        return out

    def decode_body(self, body: dict[str, Any], prefill: BackendSpec, room: int, answer: Any) -> dict[str, Any]:
        out = dict(body)
        out["kv_transfer_params"] = answer["kv_transfer_params"]
        return out

    def handoff(self, answer: Any) -> str | None:
        if not isinstance(answer, dict) or not isinstance(answer.get("kv_transfer_params"), dict):
            return "its answer has no kv_transfer_params (is it started with a KV connector, kv_role kv_producer or kv_both?)"
        return None


VLLM = _VLLM()
