"""The limits of stored responses, each crossed on a real router process:
a continuation whose conversation passes server.max_body_bytes (413 before
any upstream call), a streamed answer past ROUTER_RESPONSES_MAX_BYTES and a
full write queue (ROUTER_RESPONSES_QUEUE_MAX): both answered, not stored."""

from __future__ import annotations

import openai
import pytest

from fakes.openai_backend import server_thread
from tests.keys.e2e import create_key, sdk
from tests.support.routerproc import RouterProc, wait_until

CONFIG = """
backends:
  - {{name: native, url: '{url}', models: [a]}}
health: {{enabled: false}}
api_keys: {{mode: blocking}}
server: {{max_body_bytes: 4000}}
"""


@pytest.fixture(scope="module")
def backend():
    server = server_thread("native", ["a"]).start()
    yield server
    server.stop()


def started(backend, **env: str) -> tuple[RouterProc, openai.OpenAI]:
    proc = RouterProc(CONFIG.format(url=backend.url), env=env).start()
    return proc, sdk(proc, create_key(proc))


@pytest.fixture(scope="module")
def small(backend):
    proc, client = started(backend, ROUTER_RESPONSES_MAX_BYTES="300")
    yield client
    proc.stop()


def test_a_conversation_past_the_body_limit_is_413_before_the_upstream(small, backend):
    first = small.responses.create(model="a", input="x" * 2500)
    before = len(backend.requests)
    with pytest.raises(openai.APIStatusError) as err:
        small.responses.create(model="a", input="y" * 1500, previous_response_id=first.id)
    assert err.value.status_code == 413
    assert err.value.body["code"] == "request_too_large"
    assert len(backend.requests) == before


def test_a_stream_past_the_assembly_limit_is_answered_but_not_stored(small):
    events = list(small.responses.create(model="a", input="stream", stream=True))
    final = next(e.response for e in events if e.type == "response.completed")
    assert final.output_text
    whole = small.responses.create(model="a", input="whole")  # a whole answer is not held to it
    wait_until(lambda: small.responses.retrieve(whole.id), 30, what="the whole answer stored")
    with pytest.raises(openai.NotFoundError):  # queued before the whole one: it would be there
        small.responses.retrieve(final.id)


def test_with_the_queue_full_answers_go_on_unstored(backend):
    proc, client = started(backend, ROUTER_RESPONSES_QUEUE_MAX="0")
    try:
        made = client.responses.create(model="a", input="hi")
        assert made.output_text
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(made.id)
        assert "the write queue is full" in proc.logs()
    finally:
        proc.stop()
