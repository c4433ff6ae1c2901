"""The surface's large forms end to end: spooled to disk as they arrive,
sent upstream from the spool (again on a retry), never held whole in the web
process's memory, within the process's spool budget. The official openai SDK
(httpx for the raw cases) → a real router process → fake backends speaking
the real wire formats (fakes/media.py), all on loopback."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest

from fakes import openai_backend
from fakes.media import Form
from tests.support.routerproc import RouterProc, wait_until

CONFIG = """
backends:
  - name: a
    url: {a}
    kind: vllm
    models: [m, flaky]
  - name: b
    url: {b}
    models: [flaky]
  - name: renamed
    url: {a}/v1
    models: [public]
    served_model: internal/served
health: {{enabled: false}}
retry: {{max_attempts: 2, backoff: 0}}
server: {{max_body_bytes: 67108864}}
"""
MIB = 1024 * 1024
BUDGET = 48 * MIB


def audio(size: int) -> bytes:
    return (bytes(range(256)) * (size // 256 + 1))[:size]


def vm_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    a = openai_backend.server_thread("a", ["m", "flaky", "internal/served"]).start()
    b = openai_backend.server_thread("b", ["flaky"]).start()
    spool_dir = tmp_path_factory.mktemp("spool")
    router = RouterProc(
        CONFIG.format(a=a.url, b=b.url),
        env={"ROUTER_MAX_SPOOLED_BYTES": str(BUDGET), "ROUTER_SPOOL_DIR": str(spool_dir)},
    ).start()
    yield router, {"a": a, "b": b}, spool_dir
    router.stop()
    a.stop()
    b.stop()


@pytest.fixture
def servers(stack):
    for server in stack[1].values():
        server.behavior.reset()
        server.requests.clear()
    return stack[1]


@pytest.fixture
def client(stack, servers):
    return openai.OpenAI(base_url=stack[0].url + "/v1", api_key="none", max_retries=0, timeout=120)


def posts(server):
    return [r for r in server.requests if r.method == "POST"]


def test_a_large_form_goes_upstream_whole_with_only_its_model_renamed(client, servers, stack):
    sound = audio(6 * MIB + 7)
    out = client.audio.transcriptions.create(model="public", file=("a.wav", sound, "audio/wav"), language="de")
    assert out.text == f"Heard {len(sound)} bytes on a."
    (received,) = posts(servers["a"])
    form = Form(received.headers["content-type"], received.body)
    assert form.fields == {"model": "internal/served", "language": "de"}
    assert form.files["file"] == [("a.wav", sound)]
    # Sent with its length, not chunked: every server reads it.
    assert int(received.headers["content-length"]) == len(received.body)
    assert "transfer-encoding" not in received.headers
    assert list(stack[2].iterdir()) == []  # the spool's files have no name: nothing is left behind


def test_a_retry_sends_the_whole_spooled_form_again(client, servers):
    sound = audio(3 * MIB)
    servers["a"].behavior.status = 503
    servers["b"].behavior.status = 503
    with pytest.raises(openai.InternalServerError):
        client.audio.transcriptions.create(model="flaky", file=("a.wav", sound, "audio/wav"))
    attempts = posts(servers["a"]) + posts(servers["b"])
    assert len(attempts) == 2
    for rec in attempts:
        form = Form(rec.headers["content-type"], rec.body)
        assert form.fields["model"] == "flaky" and form.files["file"] == [("a.wav", sound)]


def test_the_web_process_never_holds_the_form_in_memory(client, servers, stack):
    router = stack[0]
    client.audio.transcriptions.create(model="m", file=("warm.wav", audio(2 * MIB), "audio/wav"))
    peak_before = vm_kb(router.proc.pid, "VmHWM")
    sound = audio(40 * MIB)
    out = client.audio.transcriptions.create(model="m", file=("big.wav", sound, "audio/wav"))
    assert out.text == f"Heard {len(sound)} bytes on a."
    grew_mb = (vm_kb(router.proc.pid, "VmHWM") - peak_before) / 1024
    assert grew_mb < 16, f"the web process's peak grew by {grew_mb:.0f} MB for a 40 MB form"


def test_past_the_spool_budget_a_form_is_503_until_the_held_one_is_answered(stack, servers):
    """A form is held from its first byte until its answer ends; together they
    stay within ROUTER_MAX_SPOOLED_BYTES, and what a finished request held is
    given back."""
    router = stack[0]
    servers["a"].behavior.hang = True
    size = 30 * MIB
    held: dict[str, object] = {}

    def first() -> None:
        try:
            httpx.post(router.url + "/v1/audio/transcriptions", data={"model": "m"},
                       files={"file": ("a.wav", audio(size))}, timeout=httpx.Timeout(120, read=None))
        except httpx.HTTPError as exc:
            held["error"] = exc

    with httpx.Client(timeout=120) as waiting:
        thread = threading.Thread(target=first, daemon=True)
        thread.start()
        wait_until(lambda: posts(servers["a"]), 60, what="the first form at the backend")
        r = waiting.post(router.url + "/v1/audio/transcriptions", data={"model": "m"},
                         files={"file": ("b.wav", audio(size))})
        assert (r.status_code, r.json()["error"]["code"]) == (503, "request_bodies_pending")
        assert r.headers["retry-after"] == "1"
        assert len(posts(servers["a"])) == 1  # the refused one never went upstream
    # The backend drops the held request: the router answers it and frees its spool.
    servers["a"].behavior.hang = False
    servers["a"].stop()
    thread.join(60)
    servers["a"].start()
    ok = httpx.post(router.url + "/v1/audio/transcriptions", data={"model": "m"},
                    files={"file": ("c.wav", audio(size))}, timeout=120)
    assert ok.status_code == 200, ok.text
    assert ok.json()["text"] == f"Heard {size} bytes on a."
