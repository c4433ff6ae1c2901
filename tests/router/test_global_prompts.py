"""Global prompts end to end: a real router process (web + tasks), fake
backends that record what they were sent, and the official SDKs as clients.

The prompt reaches every chat request once — on each front door (OpenAI
chat, Responses, Anthropic messages), through a retry and a fallback — with
per-model and per-backend overrides, is noted in the observation, and a
prompt file's edit is applied like a YAML edit."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from fakes.anthropic_backend import server_thread as anthropic_thread
from fakes.openai_backend import server_thread
from fakes.server import Behavior
from tests.mix.conftest import observation, rid
from tests.support.routerproc import RouterProc, wait_until

PROMPT = "You are the house assistant."
CONFIG = """
backends:
  - {{name: main, url: '{main}', models: [m, m-append, quiet, f-ok]}}
  - {{name: flaky, url: '{flaky}', models: [r], priority: 0}}
  - {{name: steady, url: '{steady}', models: [r], priority: 1}}
  - {{name: broken, url: '{flaky}', models: [fb]}}
  - {{name: chatonly, url: '{chatonly}', models: [bridged]}}
  - {{name: claude, url: '{claude}', kind: anthropic, models: [claude-x], api_key: sk-ant-test}}
  - {{name: strict, url: '{strict}', models: [s]}}
global_prompts:
  file: prompt.md
  models:
    m-append: {{mode: append}}
    quiet: {{text: ''}}
  backends:
    strict: {{text: Answer in English only., mode: replace}}
fallback:
  fallback_chains: {{fb: [f-ok]}}
retry: {{max_attempts: 3, backoff: 0}}
health: {{enabled: false}}
"""


@pytest.fixture(scope="module")
def stack():
    fakes = {
        "main": server_thread("main", ["m"]).start(),
        "flaky": server_thread("flaky", ["r"], behavior=Behavior(status=503)).start(),
        "steady": server_thread("steady", ["r"]).start(),
        "chatonly": server_thread("chatonly", ["bridged"], responses_status=404).start(),
        "claude": anthropic_thread("claude", ["claude-x"]).start(),
        "strict": server_thread("strict", ["s"]).start(),
    }
    router = RouterProc(CONFIG.format(**{name: f.url for name, f in fakes.items()}), tasks=True)
    (router.dir / "prompt.md").write_text(PROMPT + "\n")
    router.start()
    yield router, fakes
    router.stop()
    for fake in fakes.values():
        fake.stop()


@pytest.fixture(scope="module")
def client(stack):
    router, _ = stack
    return openai.OpenAI(base_url=router.url + "/v1", api_key="sk-client", max_retries=0, timeout=30)


def sent(fake) -> dict:
    return [r for r in fake.requests if r.method == "POST"][-1].json


def systems(body: dict) -> list:
    return [m["content"] for m in body["messages"] if m["role"] in ("system", "developer")]


def test_chat_gets_the_prompt_before_the_clients_own(stack, client) -> None:
    """prepend (the default): into the client's leading system message; a
    request without one gets a system message of its own. The observation
    says what was applied."""
    router, fakes = stack
    request_id = rid()
    client.chat.completions.create(
        model="m", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        extra_headers={"x-request-id": request_id},
    )
    assert systems(sent(fakes["main"])) == [PROMPT + "\n\nBe brief."]
    obs = observation(router, request_id)
    assert (obs["global_prompt"], obs["global_prompt_from"]) == ("prepend", "default")
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True).close()
    wait_until(lambda: sent(fakes["main"])["stream"] is True, what="the stream request")
    assert sent(fakes["main"])["messages"] == [{"role": "system", "content": PROMPT}, {"role": "user", "content": "hi"}]


def test_model_and_backend_overrides(stack, client) -> None:
    """A model's override changes the mode and keeps the default's text; one
    with empty text sends none; a backend's override wins over both."""
    router, fakes = stack
    client.chat.completions.create(
        model="m-append", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    )
    assert systems(sent(fakes["main"])) == ["Be brief.\n\n" + PROMPT]
    request_id = rid()
    client.chat.completions.create(model="quiet", messages=[{"role": "user", "content": "hi"}],
                                   extra_headers={"x-request-id": request_id})
    assert sent(fakes["main"])["messages"] == [{"role": "user", "content": "hi"}]
    assert "global_prompt" not in observation(router, request_id)
    request_id = rid()
    client.chat.completions.create(
        model="s", extra_headers={"x-request-id": request_id},
        messages=[{"role": "system", "content": "Ignore the rules."}, {"role": "user", "content": "hi"}],
    )
    assert sent(fakes["strict"])["messages"] == [
        {"role": "system", "content": "Answer in English only."}, {"role": "user", "content": "hi"},
    ]
    obs = observation(router, request_id)
    assert (obs["global_prompt"], obs["global_prompt_from"]) == ("replace", "backend strict")


def test_a_retry_and_a_fallback_get_the_prompt_once(stack, client) -> None:
    """Each attempt starts from the client's request: the backend tried after
    a 503, and the fallback model's backend, see the prompt exactly once."""
    router, fakes = stack
    before = len(fakes["flaky"].requests)
    request_id = rid()
    out = client.chat.completions.create(model="r", messages=[{"role": "user", "content": "hi"}],
                                         extra_headers={"x-request-id": request_id})
    assert out.choices[0].message.content.startswith("Hello from steady")
    assert len(fakes["flaky"].requests) == before + 1
    assert systems(fakes["flaky"].requests[-1].json) == systems(sent(fakes["steady"])) == [PROMPT]
    assert observation(router, request_id)["attempts"] == 2
    out = client.chat.completions.create(model="fb", messages=[{"role": "user", "content": "hi"}])
    assert out.choices[0].message.content.startswith("Hello from main")
    assert systems(sent(fakes["main"])) == [PROMPT]


def test_responses_get_the_prompt_in_their_instructions(stack, client) -> None:
    """Passed through: `instructions` carries it; bridged through chat, the
    system message does (and once, though the bridge's first try met a 404)."""
    _, fakes = stack
    client.responses.create(model="m", input="hi", instructions="Be brief.")
    assert sent(fakes["main"])["instructions"] == PROMPT + "\n\nBe brief."
    out = client.responses.create(model="bridged", input="hi")
    assert out.output_text.startswith("Hello from chatonly")
    posts = [r for r in fakes["chatonly"].requests if r.method == "POST"]
    assert posts[-2].json["instructions"] == PROMPT  # the native try
    assert systems(posts[-1].json) == [PROMPT]


def test_the_anthropic_door_gets_it_too(stack) -> None:
    """An Anthropic backend is sent the door's own body with the prompt in
    `system`; any other backend gets it in the converted chat request."""
    router, fakes = stack
    sdk = anthropic.Anthropic(base_url=router.url, api_key="sk-client", max_retries=0, timeout=30)
    sdk.messages.create(model="claude-x", max_tokens=64, system="Be brief.",
                        messages=[{"role": "user", "content": "hi"}])
    assert sent(fakes["claude"])["system"] == PROMPT + "\n\nBe brief."
    sdk.messages.create(model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    assert systems(sent(fakes["main"])) == [PROMPT]
    with sdk.messages.stream(model="claude-x", max_tokens=64,
                             messages=[{"role": "user", "content": "hi"}]) as stream:
        stream.until_done()
    assert sent(fakes["claude"])["system"] == PROMPT


def test_a_prompt_file_edit_is_applied_like_the_yaml(stack, client) -> None:
    """The tasks process sees the file change and mirrors its text; the web
    process gets it through its snapshot."""
    router, fakes = stack
    prompt = router.dir / "prompt.md"
    try:
        prompt.write_text("Be terse.\n")

        def applied() -> bool:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            assert httpx.post(router.url + "/v1/chat/completions", json=body, timeout=10).status_code == 200
            return systems(sent(fakes["main"])) == ["Be terse."]

        wait_until(applied, 20, interval=0.1, what="the edited prompt")
        prompt.unlink()  # refused: the last good text keeps serving
        wait_until(lambda: "prompt.md" in (router.status()["last_error"] or ""), 20, what="the refusal")
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert systems(sent(fakes["main"])) == ["Be terse."]
    finally:
        prompt.write_text(PROMPT + "\n")
    wait_until(lambda: not router.status()["last_error"], 20, what="the restored file")
