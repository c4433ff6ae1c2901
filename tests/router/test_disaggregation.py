"""Disaggregated prefill/decode end to end: the official openai SDK → router
process → fake prefill and decode replicas that enforce vLLM's and SGLang's
protocols (fakes/pd_backend.py), all real HTTP on loopback."""

from __future__ import annotations

import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx
import openai
import orjson
import pytest

from fakes import openai_backend, pd_backend
from router.config_schema import ConfigError, parse
from tests.support.routerproc import wait_until

CHAT = {"model": "lv", "messages": [{"role": "user", "content": "hi"}]}

CONFIG = """
backends:
  - {{name: p1, url: '{p1}', models: [lv], role: prefill}}
  - {{name: p2, url: '{p2}', models: [lv], role: prefill}}
  - {{name: d1, url: '{d1}', models: [lv], role: decode}}
  - {{name: d2, url: '{d2}', models: [lv], role: decode}}
  - {{name: u1, url: '{u1}', models: [lv]}}
  - {{name: sp1, url: '{sp1}', models: [sg], role: prefill, bootstrap_port: 8998}}
  - {{name: sd1, url: '{sd1}', models: [sg], role: decode}}
  - {{name: plain, url: '{u1}', models: [plain]}}
disaggregation:
  lv: vllm
  sg: sglang
retry:
  backoff: 0
health:
  enabled: false
  failure_threshold: 1000
"""


@pytest.fixture(scope="module")
def pd():
    ledger = pd_backend.Ledger()
    servers = {
        "p1": pd_backend.server_thread("p1", ["lv"], protocol="vllm", role="prefill", ledger=ledger),
        "p2": pd_backend.server_thread("p2", ["lv"], protocol="vllm", role="prefill", ledger=ledger),
        "d1": pd_backend.server_thread("d1", ["lv"], protocol="vllm", role="decode", ledger=ledger),
        "d2": pd_backend.server_thread("d2", ["lv"], protocol="vllm", role="decode", ledger=ledger),
        "u1": openai_backend.server_thread("u1", ["lv", "plain"]),
        "sp1": pd_backend.server_thread("sp1", ["sg"], protocol="sglang", role="prefill", ledger=ledger,
                                        bootstrap_port=8998),
        "sd1": pd_backend.server_thread("sd1", ["sg"], protocol="sglang", role="decode", ledger=ledger),
    }
    for server in servers.values():
        server.start()
    from tests.support.routerproc import RouterProc

    router = RouterProc(CONFIG.format(**{name: s.url for name, s in servers.items()})).start()
    try:
        yield router, servers, ledger
    finally:
        router.stop()
        for server in servers.values():
            server.stop()


@pytest.fixture
def stack(pd):
    router, servers, ledger = pd
    for server in servers.values():
        server.behavior.reset()
        server.requests.clear()
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="sk-test", max_retries=0, timeout=60)
    yield router, servers, ledger, client
    wait_until(lambda: all(b["in_flight"] == 0 for b in router.status()["backends"]), 20, what="slots released")


def posts(server):
    return [r for r in server.requests if r.method == "POST"]


def _all(servers, *names):
    return [r for name in names for r in posts(servers[name])]


# -- vLLM --------------------------------------------------------------------


def test_vllm_non_stream_hands_the_prefill_params_to_the_decode(stack):
    """The prefill leg asks for a remote decode, one token, no stream; the
    decode leg gets the client's request with the params the prefill issued."""
    _router, servers, ledger, client = stack
    consumed = ledger.consumed
    raw = client.chat.completions.with_raw_response.create(
        **CHAT, max_completion_tokens=50, extra_body={"min_tokens": 2}
    )
    assert raw.headers["x-routing-path"] == "prefill_then_decode"
    completion = raw.parse()
    assert completion.choices[0].message.content.startswith("Hello from d")
    (pre,) = _all(servers, "p1", "p2")
    assert pre.json["kv_transfer_params"] == {
        "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
        "remote_block_ids": None, "remote_host": None, "remote_port": None,
    }
    assert pre.json["stream"] is False and pre.json["max_tokens"] == 1 and pre.json["max_completion_tokens"] == 1
    assert "min_tokens" not in pre.json
    (dec,) = _all(servers, "d1", "d2")
    assert dec.json["kv_transfer_params"]["do_remote_prefill"] is True
    assert dec.json["max_completion_tokens"] == 50 and dec.json["min_tokens"] == 2
    assert "max_tokens" not in dec.json and "stream" not in dec.json  # the client's request as it came
    assert ledger.consumed == consumed + 1
    assert not posts(servers["u1"])
    assert pre.headers["x-request-id"] == dec.headers["x-request-id"]


def test_vllm_stream_through_the_sdk(stack):
    """A streaming client streams from the decode replica; the prefill never streams."""
    _router, servers, _ledger, client = stack
    raw = client.chat.completions.with_raw_response.create(
        **CHAT, stream=True, stream_options={"include_usage": True}
    )
    assert raw.headers["x-routing-path"] == "prefill_then_decode"
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("Hello from d")
    assert chunks[-1].usage is not None
    (pre,) = _all(servers, "p1", "p2")
    assert pre.json["stream"] is False and "stream_options" not in pre.json
    (dec,) = _all(servers, "d1", "d2")
    assert dec.json["stream"] is True and dec.json["stream_options"] == {"include_usage": True}


def test_vllm_completions(stack):
    _router, servers, _ledger, client = stack
    raw = client.completions.with_raw_response.create(model="lv", prompt="Say hi", max_tokens=20)
    assert raw.headers["x-routing-path"] == "prefill_then_decode"
    assert raw.parse().choices[0].text
    assert [r.path for r in _all(servers, "p1", "p2")] == ["/v1/completions"]
    assert [r.path for r in _all(servers, "d1", "d2")] == ["/v1/completions"]


def test_other_endpoints_of_a_disaggregated_model_are_unified(stack):
    """Embeddings go to the `both` replica, and say so; a model without a
    protocol carries no routing header."""
    router, servers, _ledger, client = stack
    raw = client.embeddings.with_raw_response.create(model="lv", input="one")
    assert raw.headers["x-routing-path"] == "unified"
    assert [r.path for r in posts(servers["u1"])] == ["/v1/embeddings"]
    r = httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "model": "plain"}, timeout=30)
    assert r.status_code == 200 and "x-routing-path" not in r.headers


def test_anthropic_door_reaches_the_two_legs(stack):
    """The Anthropic Messages door converts to chat and takes the same path."""
    router, servers, _ledger, _client = stack
    r = httpx.post(
        router.url + "/v1/messages",
        json={"model": "lv", "max_tokens": 30, "messages": [{"role": "user", "content": "hi"}]},
        headers={"anthropic-version": "2023-06-01"}, timeout=30,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-routing-path"] == "prefill_then_decode"
    assert len(_all(servers, "p1", "p2")) == 1 and len(_all(servers, "d1", "d2")) == 1


def test_prefill_failure_is_retried_on_another_prefill_replica(stack):
    _router, servers, _ledger, client = stack
    servers["p1"].behavior.status = 500
    for _ in range(4):
        raw = client.chat.completions.with_raw_response.create(**CHAT)
        assert raw.headers["x-routing-path"] == "prefill_then_decode"
    assert posts(servers["p1"]), "the failing prefill replica was never tried"
    assert len([r for r in posts(servers["p2"])]) == 4
    assert not posts(servers["u1"])


def test_every_prefill_failing_falls_back_to_a_unified_replica(stack):
    _router, servers, _ledger, client = stack
    servers["p1"].behavior.status = 500
    servers["p2"].behavior.drop_before_response = True
    raw = client.chat.completions.with_raw_response.create(**CHAT, stream=True)
    assert raw.headers["x-routing-path"] == "fallback"
    text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    assert text.startswith("Hello from u1")
    assert posts(servers["p1"]) and posts(servers["p2"])
    assert not _all(servers, "d1", "d2")
    body = posts(servers["u1"])[-1].json
    assert "kv_transfer_params" not in body


def test_decode_failure_takes_a_fresh_prefill_and_another_decode_replica(stack):
    """vLLM's params serve one decode: a decode failure retries the whole
    exchange (a new prefill) on the other decode replica."""
    _router, servers, _ledger, client = stack
    servers["d1"].behavior.status = 503
    for _ in range(3):
        raw = client.chat.completions.with_raw_response.create(**CHAT)
        assert raw.headers["x-routing-path"] == "prefill_then_decode"
        assert raw.parse().choices[0].message.content.startswith("Hello from d2")
    failed = len(posts(servers["d1"]))
    assert failed >= 1
    assert len(_all(servers, "p1", "p2")) == 3 + failed
    issued = [r.json["kv_transfer_params"]["remote_block_ids"] for r in _all(servers, "d1", "d2")]
    assert len({tuple(b) for b in issued}) == len(issued)  # never the same params twice


def test_metrics_count_requests_by_routing_path(stack):
    router, _servers, _ledger, client = stack
    client.chat.completions.create(**CHAT)

    def counted():
        text = httpx.get(router.url + "/metrics", timeout=10).text
        return (
            'router_routing_path_total{model="lv",path="prefill_then_decode"}' in text
            and 'router_prefill_seconds_count{model="lv"}' in text
            and 'router_decode_ttft_seconds_count{model="lv"}' in text
        )

    wait_until(counted, 30, what="the routing path counted in /metrics")


def test_every_decode_failing_falls_back_to_a_unified_replica(stack):
    _router, servers, _ledger, client = stack
    servers["d1"].behavior.status = 503
    servers["d2"].behavior.status = 503
    raw = client.chat.completions.with_raw_response.create(**CHAT)
    assert raw.headers["x-routing-path"] == "fallback"
    assert raw.parse().choices[0].message.content.startswith("Hello from u1")
    assert posts(servers["d1"]) and posts(servers["d2"])


# -- SGLang ------------------------------------------------------------------


def _sg_legs(servers):
    (pre,) = posts(servers["sp1"])
    (dec,) = posts(servers["sd1"])
    return pre.json, dec.json


@pytest.mark.parametrize("stream", [False, True])
def test_sglang_both_legs_meet_in_one_bootstrap_room(stack, stream):
    _router, servers, ledger, client = stack
    joined = ledger.joined
    raw = client.chat.completions.with_raw_response.create(**{**CHAT, "model": "sg"}, stream=stream)
    assert raw.headers["x-routing-path"] == "prefill_then_decode"
    answer = raw.parse()
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in answer if c.choices)
    else:
        text = answer.choices[0].message.content
    assert text.startswith("Hello from sd1")
    pre, dec = _sg_legs(servers)
    assert pre == dec  # the same body to both
    assert pre["bootstrap_host"] == urlsplit(servers["sp1"].url).hostname
    assert pre["bootstrap_port"] == 8998
    assert isinstance(pre["bootstrap_room"], int) and 0 <= pre["bootstrap_room"] < 2**63
    assert ledger.joined == joined + 1


def test_sglang_batch_gets_a_room_per_sequence(stack):
    _router, servers, _ledger, client = stack
    raw = client.completions.with_raw_response.create(model="sg", prompt=["a", "b"], max_tokens=5)
    assert raw.headers["x-routing-path"] == "prefill_then_decode"
    pre, _dec = _sg_legs(servers)
    assert pre["bootstrap_host"] == ["127.0.0.1", "127.0.0.1"] and pre["bootstrap_port"] == [8998, 8998]
    assert len(set(pre["bootstrap_room"])) == 2


def test_sglang_prefill_failure_without_a_unified_replica_is_a_502_naming_the_phase(stack):
    _router, servers, _ledger, client = stack
    # The prefill fails only once the decode leg waits in its room, so the
    # cancellation checked below always has a decode leg to cancel.
    gate = threading.Event()
    servers["sp1"].behavior.status = 500
    servers["sp1"].behavior.gate = gate
    seen = len(posts(servers["sd1"]))
    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(client.chat.completions.create, **{**CHAT, "model": "sg"})
        wait_until(lambda: len(posts(servers["sd1"])) > seen, 30, what="the decode leg sent")
        gate.set()
        with pytest.raises(openai.APIStatusError) as info:
            call.result(timeout=60)
    err = info.value
    assert err.status_code == 502
    assert err.response.headers["x-routing-path"] == "fallback"
    body = err.response.json()["error"]
    assert body["code"] == "prefill_failed" and "prefill phase of 'sg'" in body["message"]
    assert set(body) == {"message", "type", "param", "code"}
    # The decode leg that waited in the room was cancelled, not left waiting.
    dec = posts(servers["sd1"])[-1]
    assert dec.finished.wait(20) and dec.outcome == "cancelled"


def test_client_disconnect_cancels_both_legs(stack):
    """Both legs are in flight (the prefill hangs, the decode waits in its
    room) when the client goes: both upstream requests are cancelled."""
    router, servers, _ledger, _client = stack
    servers["sp1"].behavior.hang = True
    url = urlsplit(router.url)
    body = orjson.dumps({**CHAT, "model": "sg", "stream": True})
    sock = socket.create_connection((url.hostname, url.port), timeout=30)
    try:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
        )
        wait_until(lambda: posts(servers["sp1"]) and posts(servers["sd1"]), 30, what="both legs sent")
    finally:
        sock.close()
    for name in ("sp1", "sd1"):
        req = posts(servers[name])[-1]
        assert req.finished.wait(20), f"the {name} leg still runs after the client left"
        assert req.outcome == "cancelled"


# -- configuration -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("backends:\n  - {name: p, url: 'http://a:1', models: [m], role: prefill}\ndisaggregation: {m: vllm}\n",
         "disaggregation.m: no backend with role: decode"),
        ("backends:\n  - {name: d, url: 'http://a:1', models: [m], role: decode}\ndisaggregation: {m: sglang}\n",
         "disaggregation.m: no backend with role: prefill"),
        ("backends:\n  - {name: p, url: 'http://a:1', models: [m], role: prefill, bootstrap_port: 9}\n"
         "  - {name: d, url: 'http://b:1', models: [m], role: decode}\ndisaggregation: {m: vllm}\n",
         "backends[0].bootstrap_port"),
        ("backends:\n  - {name: d, url: 'http://b:1', models: [m], role: decode, bootstrap_port: 9}\n",
         "bootstrap_port: only an SGLang prefill replica"),
        ("backends:\n  - {name: o, url: 'http://b:1', models: [m], kind: ollama, role: prefill}\n",
         "backends[0]: Value error, role: only an OpenAI-compatible backend"),
        ("backends:\n  - {name: p, url: 'http://a:1', models: [m], role: prefill}\n",
         "backends[0].role: 'p' is a prefill replica of 'm', which has no disaggregation entry"),
        ("disaggregation: {m: tgi}\n", "disaggregation: Value error, m: unknown protocol 'tgi'; one of: sglang, vllm"),
    ],
)
def test_config_refusals_name_the_key(text, names):
    with pytest.raises(ConfigError) as info:
        parse(text)
    assert names in str(info.value)


def test_config_accepts_a_disaggregated_model():
    cfg, _raw = parse(
        "backends:\n  - {name: p, url: 'http://a:1', models: [m], role: prefill, bootstrap_port: 8998}\n"
        "  - {name: d, url: 'http://b:1', models: [m], role: decode}\n"
        "  - {name: u, url: 'http://c:1', models: [m]}\ndisaggregation: {m: sglang}\n"
    )
    assert cfg.disaggregation == {"m": "sglang"}
    assert [(b.role, b.bootstrap_port) for b in cfg.backends] == [("prefill", 8998), ("decode", None), ("both", None)]


def test_a_phase_without_a_healthy_replica_is_a_503_naming_it(router_factory):
    """Once the breaker has opened on the only prefill replica (and with no
    unified replica), a request is refused at once: 503 naming the phase."""
    ledger = pd_backend.Ledger()
    with (
        pd_backend.server_thread("sp", ["sg"], protocol="sglang", role="prefill", ledger=ledger) as sp,
        pd_backend.server_thread("sd", ["sg"], protocol="sglang", role="decode", ledger=ledger) as sd,
    ):
        sp.behavior.status = 500
        router = router_factory(
            f"backends:\n  - {{name: sp, url: '{sp.url}', models: [sg], role: prefill}}\n"
            f"  - {{name: sd, url: '{sd.url}', models: [sg], role: decode}}\n"
            "disaggregation: {sg: sglang}\nretry: {backoff: 0}\n"
            "health: {enabled: false, failure_threshold: 1, cooldown: 100}\n"
        )
        first = httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "model": "sg"}, timeout=60)
        assert first.status_code == 502 and first.json()["error"]["code"] == "prefill_failed"
        second = httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "model": "sg"}, timeout=60)
        assert second.status_code == 503, second.text
        assert second.headers["x-routing-path"] == "fallback"
        error = second.json()["error"]
        assert error["code"] == "phase_unavailable" and "No healthy prefill replica" in error["message"]
        assert len(posts(sp)) == 1  # the open breaker kept the second request away
