"""`/v1/responses` on every OpenAI-compatible backend (`responses: native |
bridge | auto`), behind a real router process, driven by the official openai
SDK's `client.responses.create`. The chat-only backends are the fake OpenAI
server answering `/v1/responses` as llama.cpp's server does (404) or with a
405; what each backend was asked is read from its own request log."""

from __future__ import annotations

import openai
import pytest
from openai.types.responses import Response

from fakes.openai_backend import server_thread
from router.core.backend import BackendSpec
from router.providers.bridge.choice import Learned
from tests.mix.conftest import observation, rid
from tests.support.routerproc import RouterProc

CONFIG = """
backends:
  - name: llama
    url: {llama}
    models: [llama]
  - name: tgi
    url: {tgi}
    models: [tgi]
  - name: pinned-native
    url: {native}
    models: [pinned-native]
    responses: native
  - name: forced
    url: {full}
    models: [forced]
    responses: bridge
  - name: full
    url: {full}
    models: [full]
health:
  enabled: false
retry:
  max_attempts: 1
"""


@pytest.fixture(scope="module")
def fakes():
    servers = {
        "llama": server_thread("llama", ["llama"], responses_status=404).start(),
        "tgi": server_thread("tgi", ["tgi"], responses_status=405).start(),
        "native": server_thread("chat-only", ["pinned-native"], responses_status=404).start(),
        "full": server_thread("full", ["full", "forced"]).start(),
    }
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="module")
def router(fakes):
    proc = RouterProc(CONFIG.format(**{name: server.url for name, server in fakes.items()})).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(router):
    return openai.OpenAI(base_url=router.url + "/v1", api_key="sk-client", max_retries=0, timeout=30)


def paths(server, since: int = 0) -> list[str]:
    return [r.path for r in server.requests[since:] if r.method == "POST"]


def streamed_text(client, model: str, request_id: str | None = None) -> tuple[str, list[str]]:
    events = list(
        client.responses.create(
            model=model, input="hi", stream=True,
            extra_headers={"x-request-id": request_id} if request_id else None,
        )
    )
    kinds = [e.type for e in events]
    done = [e for e in events if e.type == "response.completed"]
    assert len(done) == 1 and kinds[0] == "response.created"
    return done[0].response.output_text, kinds


@pytest.mark.parametrize(("model", "status"), [("llama", 404), ("tgi", 405)])
def test_a_chat_only_backend_serves_responses_through_the_bridge(router, client, fakes, model, status) -> None:
    """The first Responses call meets the 404/405 and is served through the
    chat bridge at once; the next ones go straight to the bridge."""
    server = fakes[model]
    request_id = rid()
    out = client.responses.create(model=model, input="hi", instructions="Be brief.",
                                  extra_headers={"x-request-id": request_id})
    assert isinstance(out, Response) and out.status == "completed" and out.model == model
    assert out.output_text == f"Hello from {model}. This is a demo reply."
    assert paths(server) == ["/v1/responses", "/v1/chat/completions"]
    assert server.requests[-1].json["messages"][0] == {"role": "system", "content": "Be brief."}
    assert observation(router, request_id)["adapter"] == "responses-bridge"
    seen = len(server.requests)
    text, kinds = streamed_text(client, model)
    assert text == f"Hello from {model}. This is a demo reply." and "response.output_text.delta" in kinds
    assert paths(server, seen) == ["/v1/chat/completions"]  # remembered: no second 404
    seen = len(server.requests)
    assert client.responses.create(model=model, input="again").output_text == f"Hello from {model}. This is a demo reply."
    assert paths(server, seen) == ["/v1/chat/completions"]


def test_a_first_streamed_call_is_bridged_too(fakes) -> None:
    """The 404 of a first call that streams is bridged into the stream the client asked for."""
    server = server_thread("llama-2", ["llama"], responses_status=404).start()
    proc = None
    try:
        config = f"backends:\n  - name: l2\n    url: {server.url}\n    models: [llama]\nhealth: {{enabled: false}}\n"
        proc = RouterProc(config).start()
        client = openai.OpenAI(base_url=proc.url + "/v1", api_key="k", max_retries=0, timeout=30)
        text, kinds = streamed_text(client, "llama")
        assert text == "Hello from llama-2. This is a demo reply."
        assert kinds[-1] == "response.completed"
        assert paths(server) == ["/v1/responses", "/v1/chat/completions"]
    finally:
        if proc is not None:
            proc.stop()
        server.stop()


def test_native_relays_what_the_backend_answers(client, fakes) -> None:
    """`responses: native` passes the request through, 404 included."""
    server = fakes["native"]
    seen = len(server.requests)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="pinned-native", input="hi")
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="pinned-native", input="hi")
    assert paths(server, seen) == ["/v1/responses", "/v1/responses"]


def test_bridge_never_asks_the_responses_path(client, fakes) -> None:
    """`responses: bridge` converts even for a server that serves Responses."""
    server = fakes["full"]
    seen = len(server.requests)
    out = client.responses.create(model="forced", input="hi")
    text, _ = streamed_text(client, "forced")
    assert out.output_text == text == "Hello from full. This is a demo reply."
    assert paths(server, seen) == ["/v1/chat/completions", "/v1/chat/completions"]


def test_auto_passes_a_served_responses_api_through(router, client, fakes) -> None:
    """A backend that serves Responses gets them as they are, streamed or not,
    and is then known to: its later 404 would be relayed, not bridged."""
    server = fakes["full"]
    seen = len(server.requests)
    request_id = rid()
    out = client.responses.create(model="full", input="hi", extra_headers={"x-request-id": request_id})
    text, _ = streamed_text(client, "full")
    assert out.output_text == text == "Hello from full. This is a demo reply."
    assert paths(server, seen) == ["/v1/responses", "/v1/responses"]
    assert "adapter" not in observation(router, request_id)


def test_what_is_learned_is_bounded() -> None:
    """Past its limit the oldest backend is forgotten (and learned again on its next call)."""
    learned = Learned(limit=2)
    a, b, c = (BackendSpec(name=n, url=f"http://{n}:1") for n in "abc")
    learned.set(a, "bridge")
    learned.set(b, "native")
    learned.set(c, "bridge")
    assert len(learned) == 2 and learned.get(a) is None
    assert (learned.get(b), learned.get(c)) == ("native", "bridge")
    moved = BackendSpec(name="c", url="http://elsewhere:1")
    assert learned.get(moved) is None  # another server under the same name is learned again
