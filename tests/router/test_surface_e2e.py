"""The rest of the OpenAI surface end to end: images, audio, moderations,
vLLM's rerank and score. The official openai SDK (httpx for rerank and
score, which it has no call for) → a real router process → fake backends
speaking the real wire formats (fakes/media.py), all on loopback."""

from __future__ import annotations

import base64
import threading

import httpx
import openai
import pytest

from fakes import anthropic_backend, ollama_backend, openai_backend
from fakes.media import PNG, Form
from tests.keys.e2e import create_key
from tests.mix.conftest import observation
from tests.support.routerproc import RouterProc, wait_until

CONFIG = """
backends:
  - name: a
    url: {a}
    kind: vllm
    models: [m, other, flaky]
  - name: b
    url: {b}
    models: [flaky]
  - name: renamed
    url: {a}/v1
    models: [public]
    served_model: internal/served
  - name: claude
    url: {claude}
    kind: anthropic
    api_key: sk-ant-test
    models: [claude-m]
    served_model: claude-sonnet-4-5
  - name: llama
    url: {llama}
    kind: ollama
    models: [llama-m]
    served_model: llama3.2
health: {{enabled: false}}
retry: {{max_attempts: 2, backoff: 0}}
api_keys: {{mode: blocking}}
server: {{max_body_bytes: 262144}}
"""
AUDIO = bytes(range(256)) * 64  # 16 KiB of "audio"


@pytest.fixture(scope="module")
def stack():
    a = openai_backend.server_thread("a", ["m", "other", "flaky", "internal/served"]).start()
    b = openai_backend.server_thread("b", ["flaky"]).start()
    claude = anthropic_backend.server_thread("claude", ["claude-sonnet-4-5"], api_key="sk-ant-test").start()
    llama = ollama_backend.server_thread("llama", ["llama3.2"]).start()
    router = RouterProc(CONFIG.format(a=a.url, b=b.url, claude=claude.url, llama=llama.url)).start()
    key = create_key(router)
    yield router, key, {"a": a, "b": b, "claude": claude, "llama": llama}
    router.stop()
    for server in (a, b, claude, llama):
        server.stop()


@pytest.fixture
def servers(stack):
    _router, _key, servers = stack
    for server in servers.values():
        server.behavior.reset()
        server.requests.clear()
    return servers


@pytest.fixture
def client(stack, servers):
    router, key, _ = stack
    return openai.OpenAI(base_url=router.url + "/v1", api_key=key, max_retries=0, timeout=60)


def posts(server):
    return [r for r in server.requests if r.method == "POST"]


def bearer(stack) -> dict[str, str]:
    return {"authorization": f"Bearer {stack[1]}"}


# -- images --------------------------------------------------------------------
def test_image_generation_is_relayed_byte_for_byte(client, servers):
    """The backend gets the client's JSON as sent; the SDK parses the answer."""
    out = client.images.generate(model="m", prompt="a red square", n=2, extra_body={"vendor_knob": [1]})
    assert len(out.data) == 2 and base64.b64decode(out.data[0].b64_json) == PNG
    assert out.usage is not None and out.usage.total_tokens > 0
    (received,) = posts(servers["a"])
    assert received.path == "/v1/images/generations"
    assert received.json == {"model": "m", "prompt": "a red square", "n": 2, "vendor_knob": [1]}
    assert "authorization" not in received.headers  # the client's key never goes upstream


def test_image_generation_stream_under_a_served_name(client, servers):
    """`stream: true`: the backend's events come through as SSE, the served name only upstream."""
    events = list(client.images.generate(model="public", prompt="p", stream=True, partial_images=2))
    assert [e.type for e in events] == ["image_generation.partial_image"] * 2 + ["image_generation.completed"]
    assert base64.b64decode(events[-1].b64_json) == PNG and events[-1].usage.total_tokens > 0
    (received,) = posts(servers["a"])
    assert received.json["model"] == "internal/served" and received.json["stream"] is True


def test_image_edit_multipart_reaches_the_backend_whole(client, servers):
    """A multipart edit: the file bytes and every field reach the backend unchanged."""
    image = PNG + b"\x00" * 5000
    out = client.images.edit(model="m", image=("in.png", image, "image/png"), prompt="make it blue")
    assert base64.b64decode(out.data[0].b64_json) == PNG
    (received,) = posts(servers["a"])
    assert received.path == "/v1/images/edits"
    assert received.headers["content-type"].startswith("multipart/form-data; boundary=")
    form = Form(received.headers["content-type"], received.body)
    assert form.fields["model"] == "m" and form.fields["prompt"] == "make it blue"
    assert form.files["image"] == [("in.png", image)]


def test_image_edit_with_a_served_name_rewrites_only_the_model_field(client, servers):
    image = PNG * 20
    client.images.edit(model="public", image=("x.png", image, "image/png"), prompt="p")
    (received,) = posts(servers["a"])
    form = Form(received.headers["content-type"], received.body)
    assert form.fields["model"] == "internal/served"
    assert form.fields["prompt"] == "p" and form.files["image"] == [("x.png", image)]


def test_image_variation(client, servers):
    out = client.images.create_variation(model="m", image=("v.png", PNG, "image/png"), n=3)
    assert len(out.data) == 3
    assert posts(servers["a"])[0].path == "/v1/images/variations"


# -- audio ---------------------------------------------------------------------
def test_transcription_multipart_json_and_text(client, servers):
    out = client.audio.transcriptions.create(model="m", file=("a.wav", AUDIO, "audio/wav"))
    assert out.text == f"Heard {len(AUDIO)} bytes on a."
    text = client.audio.transcriptions.create(model="m", file=("a.wav", AUDIO, "audio/wav"), response_format="text")
    assert text.strip() == f"Heard {len(AUDIO)} bytes on a."
    received = posts(servers["a"])
    assert [r.path for r in received] == ["/v1/audio/transcriptions"] * 2
    assert Form(received[0].headers["content-type"], received[0].body).files["file"] == [("a.wav", AUDIO)]


def test_transcription_stream_events(client, servers):
    """`stream` true in the form: the backend's events come through as SSE."""
    events = list(client.audio.transcriptions.create(model="m", file=("a.wav", AUDIO, "audio/wav"), stream=True))
    assert events[0].type == "transcript.text.delta"
    assert events[-1].type == "transcript.text.done" and events[-1].text.startswith("Heard ")


def test_translation(client, servers):
    out = client.audio.translations.create(model="m", file=("a.mp3", AUDIO[:100], "audio/mpeg"))
    assert out.text == "Heard 100 bytes on a."
    assert posts(servers["a"])[0].path == "/v1/audio/translations"


@pytest.mark.parametrize("model", ["m", "public"])
def test_speech_is_relayed_chunk_by_chunk(client, servers, model):
    """The audio's first bytes reach the client while the backend still holds
    the rest back: the router relays, never gathers, a binary answer (even
    under a served name, where a JSON answer would be read whole to put the
    client's name back)."""
    a = servers["a"]
    hold = a.behavior.hold = threading.Event()
    a.behavior.chunks = 4
    chunk = [f"[a:{i}:hello]".encode() + bytes(range(256)) * 4 for i in range(4)]
    try:
        with client.audio.speech.with_streaming_response.create(model=model, voice="alloy", input="hello") as resp:
            assert resp.headers["content-type"] == "audio/mpeg"
            got = b""
            pieces = resp.iter_bytes()
            while len(got) < len(chunk[0]):
                got += next(pieces)
            assert got == chunk[0]
            (received,) = posts(a)
            assert received.outcome is None  # the backend is still answering
            hold.set()
            got += b"".join(pieces)
    finally:
        hold.set()
    assert got == b"".join(chunk)


def test_speech_under_a_served_name(client, servers):
    """The backend's served name goes upstream; the audio comes back whole and untouched."""
    servers["a"].behavior.chunks = 3
    audio = client.audio.speech.create(model="public", voice="alloy", input="hi", response_format="wav")
    assert audio.content == b"".join(f"[a:{i}:hi]".encode() + bytes(range(256)) * 4 for i in range(3))
    assert audio.response.headers["content-type"] == "audio/wav"
    (received,) = posts(servers["a"])
    assert received.json["model"] == "internal/served" and received.path == "/v1/audio/speech"


def test_speech_client_gone_closes_the_upstream(stack, servers):
    """A client that leaves mid-audio ends the backend's answer too."""
    a = servers["a"]
    hold = a.behavior.hold = threading.Event()
    try:
        with httpx.stream("POST", stack[0].url + "/v1/audio/speech", headers=bearer(stack), timeout=60,
                          json={"model": "m", "voice": "alloy", "input": "x"}) as resp:
            assert resp.status_code == 200
            next(resp.iter_raw())
        (received,) = posts(a)
        wait_until(lambda: received.outcome is not None, 30, what="the backend's answer to end")
        assert received.outcome == "cancelled"
    finally:
        hold.set()


# -- moderations, rerank, score ---------------------------------------------------
def test_moderations(client, servers):
    out = client.moderations.create(model="m", input=["hello", "I will kill the process"])
    assert [r.flagged for r in out.results] == [False, True]
    assert out.model == "m"
    assert posts(servers["a"])[0].path == "/v1/moderations"


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v2/rerank"])
def test_rerank_on_every_vllm_path(stack, servers, path):
    """Each rerank path goes to the same path on the backend, the model name
    the client asked for coming back even when the backend serves another."""
    body = {"model": "public", "query": "red fox", "documents": ["a blue whale", "the red fox", "fox"], "top_n": 2}
    r = httpx.post(stack[0].url + path, json=body, headers=bearer(stack), timeout=60)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["model"] == "public"
    assert [x["index"] for x in answer["results"]] == [2, 1]
    assert answer["results"][0]["document"] == {"text": "fox"} and answer["usage"]["total_tokens"] > 0
    (received,) = posts(servers["a"])
    assert received.path == path and received.json["model"] == "internal/served"


def test_score(stack, servers):
    body = {"model": "m", "text_1": "red fox", "text_2": ["red fox", "blue whale"]}
    r = httpx.post(stack[0].url + "/v1/score", json=body, headers=bearer(stack), timeout=60)
    assert r.status_code == 200, r.text
    assert [d["score"] for d in r.json()["data"]] == [1.0, 0.0]
    assert r.json()["object"] == "list"
    assert posts(servers["a"])[0].path == "/v1/score"


# -- routing: retries, kinds, keys, limits -------------------------------------------
def test_a_failed_backend_is_retried_with_the_whole_form(client, servers):
    """The same retries as every /v1 endpoint: the form goes whole to the next backend."""
    for name in ("a", "b"):
        servers[name].behavior.status = 503
    with pytest.raises(openai.InternalServerError):
        client.audio.transcriptions.create(model="flaky", file=("a.wav", AUDIO, "audio/wav"))
    assert len(posts(servers["a"])) + len(posts(servers["b"])) == 2
    servers["a"].behavior.status = None
    for _ in range(4):  # whichever is picked first, the answer is a's
        out = client.audio.transcriptions.create(model="flaky", file=("a.wav", AUDIO, "audio/wav"))
        assert out.text == f"Heard {len(AUDIO)} bytes on a."
    for rec in posts(servers["a"]) + posts(servers["b"]):
        assert Form(rec.headers["content-type"], rec.body).files["file"] == [("a.wav", AUDIO)]


@pytest.mark.parametrize(("model", "kind", "server"), [("claude-m", "anthropic", "claude"), ("llama-m", "ollama", "llama")])
def test_a_kind_without_the_endpoint_is_400_before_any_upstream_call(stack, client, servers, model, kind, server):
    with pytest.raises(openai.BadRequestError) as err:
        client.images.generate(model=model, prompt="x")
    assert err.value.body["code"] == "unsupported_endpoint"
    assert f"'{kind}'" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.transcriptions.create(model=model, file=("a.wav", AUDIO, "audio/wav"))
    assert err.value.body["code"] == "unsupported_endpoint"
    r = httpx.post(stack[0].url + "/v2/rerank", json={"model": model, "query": "q", "documents": ["d"]},
                   headers=bearer(stack), timeout=60)
    assert (r.status_code, r.json()["error"]["code"]) == (400, "unsupported_endpoint")
    assert r.json()["error"]["message"].startswith(f"/v2/rerank is not served by backends of kind '{kind}'")
    assert posts(servers[server]) == []


def test_a_key_not_allowed_the_model_gets_the_gates_answer(stack, servers):
    router, _key, _ = stack
    key = create_key(router, "--models", "m")
    limited = openai.OpenAI(base_url=router.url + "/v1", api_key=key, max_retries=0, timeout=60)
    assert limited.images.generate(model="m", prompt="x").data
    with pytest.raises(openai.PermissionDeniedError) as err:
        limited.images.generate(model="other", prompt="x")
    assert err.value.body["code"] == "model_not_allowed"
    with pytest.raises(openai.PermissionDeniedError) as err:  # the form's model field is checked the same way
        limited.audio.transcriptions.create(model="other", file=("a.wav", AUDIO, "audio/wav"))
    assert err.value.body["code"] == "model_not_allowed"
    r = httpx.post(router.url + "/rerank", json={"model": "other", "query": "q", "documents": ["d"]},
                   headers={"authorization": f"Bearer {key}"}, timeout=60)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "model_not_allowed")
    assert len(posts(servers["a"])) == 1
    r = httpx.post(router.url + "/v2/rerank", json={"model": "m", "query": "q", "documents": ["d"]}, timeout=60)
    assert (r.status_code, r.json()["error"]["code"]) == (401, "missing_api_key")


def test_bad_requests_are_openai_shaped(stack, servers):
    url, headers = stack[0].url, bearer(stack)
    r = httpx.post(url + "/v1/audio/transcriptions", headers=headers, files={"file": ("a.wav", AUDIO)}, timeout=60)
    assert (r.status_code, r.json()["error"]["code"]) == (400, "missing_model")
    r = httpx.post(url + "/v1/audio/transcriptions", headers=headers, json={"model": "m"}, timeout=60)
    assert (r.status_code, r.json()["error"]["code"]) == (415, "unsupported_media_type")
    r = httpx.post(url + "/v1/audio/transcriptions", headers=headers, timeout=60,
                   files=[("model", (None, "m")), ("model", (None, "other")), ("file", ("a.wav", AUDIO))])
    assert (r.status_code, r.json()["error"]["code"]) == (400, "duplicate_key")
    r = httpx.post(url + "/v1/images/edits", headers={**headers, "content-type": "multipart/form-data; boundary=zz"},
                   content=b"--zz\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm", timeout=60)
    assert (r.status_code, r.json()["error"]["code"]) == (400, "invalid_request")
    r = httpx.post(url + "/v1/moderations", headers=headers, content=b"{nope", timeout=60)
    assert (r.status_code, r.json()["error"]["code"]) == (400, "invalid_json")
    r = httpx.get(url + "/v1/images/generations", headers=headers, timeout=60)
    assert (r.status_code, r.json()["error"]["code"], r.headers["allow"]) == (405, "method_not_allowed", "POST")
    r = httpx.get(url + "/rerank", headers=headers, timeout=60)
    assert r.status_code == 405
    r = httpx.post(url + "/v1/images/generations/", headers=headers, json={"model": "m", "prompt": "x"}, timeout=60)
    assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found")
    assert "Did you mean /v1/images/generations?" in r.json()["error"]["message"]
    assert posts(servers["a"]) == []


def test_a_form_past_the_body_limit_is_413(stack, servers):
    """server.max_body_bytes holds for forms too: refused, nothing sent upstream."""
    big = b"\x01" * 300_000
    r = httpx.post(stack[0].url + "/v1/audio/transcriptions", headers=bearer(stack), timeout=60,
                   data={"model": "m"}, files={"file": ("big.wav", big)})
    assert (r.status_code, r.json()["error"]["code"]) == (413, "request_too_large")
    assert posts(servers["a"]) == []


def test_usage_is_observed_per_request(stack, servers):
    """The rerank's usage lands in its observation (per-key usage reads it), as for /v1/embeddings."""
    router = stack[0]
    r = httpx.post(router.url + "/v1/rerank", headers={**bearer(stack), "x-request-id": "rerank-usage-1"},
                   timeout=60, json={"model": "m", "query": "one two", "documents": ["one", "two three"]})
    assert r.status_code == 200
    obs = observation(router, "rerank-usage-1", timeout=30)
    assert obs["endpoint"] == "rerank" and obs["provider"] == "a" and obs.get("key")
    assert obs["usage"]["total_tokens"] == r.json()["usage"]["total_tokens"]
