"""The prefill/decode fakes enforce their protocols (what makes the router's
disaggregation tests able to fail)."""

from __future__ import annotations

import httpx

from fakes import pd_backend

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
ASK = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None, "remote_block_ids": None,
       "remote_host": None, "remote_port": None}


def test_vllm_decode_takes_only_params_a_prefill_issued_once():
    ledger = pd_backend.Ledger()
    with (
        pd_backend.server_thread("p", ["m"], protocol="vllm", role="prefill", ledger=ledger) as p,
        pd_backend.server_thread("d", ["m"], protocol="vllm", role="decode", ledger=ledger) as d,
    ):
        url = "/v1/chat/completions"
        assert httpx.post(p.url + url, json=CHAT, timeout=10).status_code == 400  # no kv_transfer_params
        streaming = {**CHAT, "stream": True, "max_tokens": 1, "kv_transfer_params": ASK}
        assert httpx.post(p.url + url, json=streaming, timeout=10).status_code == 400
        r = httpx.post(p.url + url, json={**CHAT, "stream": False, "max_tokens": 1, "kv_transfer_params": ASK},
                       timeout=10)
        assert r.status_code == 200
        params = r.json()["kv_transfer_params"]
        assert params["do_remote_prefill"] is True and params["remote_block_ids"]
        forged = {**params, "remote_block_ids": [999]}
        assert httpx.post(d.url + url, json={**CHAT, "kv_transfer_params": forged}, timeout=10).status_code == 400
        assert httpx.post(d.url + url, json={**CHAT, "kv_transfer_params": params}, timeout=10).status_code == 200
        again = httpx.post(d.url + url, json={**CHAT, "kv_transfer_params": params}, timeout=10)
        assert again.status_code == 400  # the blocks were read once
        assert httpx.post(d.url + url, json=CHAT, timeout=10).status_code == 400


def test_sglang_decode_fails_without_a_prefill_in_its_room():
    ledger = pd_backend.Ledger()
    with (
        pd_backend.server_thread("p", ["m"], protocol="sglang", role="prefill", ledger=ledger,
                                 bootstrap_port=8998) as p,
        pd_backend.server_thread("d", ["m"], protocol="sglang", role="decode", ledger=ledger,
                                 room_wait_s=0.2) as d,
    ):
        url = "/v1/chat/completions"
        body = {**CHAT, "bootstrap_host": "127.0.0.1", "bootstrap_port": 8998, "bootstrap_room": 42}
        lonely = httpx.post(d.url + url, json=body, timeout=10)
        assert lonely.status_code == 500 and "bootstrap room 42" in lonely.json()["error"]["message"]
        wrong_port = httpx.post(p.url + url, json={**body, "bootstrap_port": 1}, timeout=10)
        assert wrong_port.status_code == 400
        assert httpx.post(p.url + url, json=body, timeout=10).status_code == 200
        assert httpx.post(d.url + url, json=body, timeout=10).status_code == 200
        assert ledger.joined == 1
