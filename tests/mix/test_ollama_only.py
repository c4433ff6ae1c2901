"""An Ollama-only model group through the official openai SDK (seed 002 S05; MIX-5).

The group `olla` has one provider, of kind `ollama`: the router finds it as
an ordinary candidate and answers every standard call in the exact OpenAI
shapes, converted from Ollama's native API.
"""

from __future__ import annotations

import httpx
from openai.types.chat import ChatCompletion

from tests.mix.conftest import marker, observation, received, rid
from tests.router.providers.openai_shapes import no_extras

TEXT = "Hello from ollama-o. This is a demo reply."


def test_group_is_listed_and_chat_answers(stack):
    """S05: the group is a listed model and a Chat request gets a normalized answer."""
    client = stack.client()
    assert "olla" in {m.id for m in client.models.list()}
    mark, request_id = marker(), rid()
    out = client.chat.completions.create(
        model="olla",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": mark}],
        temperature=0.2,
        max_tokens=64,
        extra_headers={"x-request-id": request_id},
    )
    assert isinstance(out, ChatCompletion)
    no_extras(out)
    assert out.object == "chat.completion" and out.id.startswith("chatcmpl-")
    assert out.model == "olla"
    assert out.choices[0].message.content == TEXT
    assert out.choices[0].finish_reason == "stop"
    assert out.usage is not None and out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens
    (req,) = received(stack.ollama, mark)
    assert req.path == "/api/chat"
    assert req.json == {
        "model": "llama3.2",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": mark}],
        "stream": False,
        "options": {"temperature": 0.2, "num_predict": 64},
    }
    obs = observation(stack.router, request_id)
    assert (obs["provider"], obs["path"], obs["adapter"], obs["status"]) == ("ollama-o", "normalized", "ollama", 200)


def test_chat_stream(stack):
    client = stack.client()
    mark = marker()
    chunks = list(
        client.chat.completions.create(
            model="olla",
            messages=[{"role": "user", "content": mark}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    for chunk in chunks:
        no_extras(chunk)
        assert chunk.object == "chat.completion.chunk" and chunk.model == "olla"
    assert len({c.id for c in chunks}) == 1
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    (req,) = received(stack.ollama, mark)
    assert req.json["stream"] is True


def test_responses_api_both_ways(stack):
    """S05 for the Responses API, non-streamed and streamed."""
    client = stack.client()
    mark = marker()
    resp = client.responses.create(model="olla", input=mark, instructions="be brief", max_output_tokens=50)
    no_extras(resp)
    assert resp.status == "completed" and resp.model == "olla"
    assert resp.output_text == TEXT
    (req,) = received(stack.ollama, mark)
    assert req.path == "/api/chat"
    assert req.json["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": mark}]
    assert req.json["options"] == {"num_predict": 50}
    mark = marker()
    events = list(client.responses.create(model="olla", input=mark, stream=True))
    for event in events:
        no_extras(event)
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert events[-1].response.output_text == TEXT
    assert len(received(stack.ollama, mark)) == 1


def test_embeddings(stack):
    client = stack.client()
    mark = marker()
    out = client.embeddings.create(model="olla", input=[mark, "two"], encoding_format="float")
    no_extras(out)
    assert [d.index for d in out.data] == [0, 1] and len(out.data[0].embedding) > 0
    (req,) = received(stack.ollama, mark)
    assert req.path == "/api/embed" and req.json["input"] == [mark, "two"]


def test_unknown_group_is_404_not_a_dispatch(stack):
    before = stack.arrived()
    r = httpx.post(
        stack.router.url + "/v1/chat/completions",
        json={"model": "no-such-group", "messages": [{"role": "user", "content": "x"}]},
        timeout=30,
    )
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert stack.arrived() == before


def test_legacy_completions_is_refused_before_dispatch(stack):
    """/v1/completions has no Ollama counterpart on the normalized path: an explicit
    400 unsupported_parameter, and Ollama receives nothing."""
    before = stack.ollama.meter.arrived
    r = httpx.post(stack.router.url + "/v1/completions", json={"model": "olla", "prompt": "hi"}, timeout=30)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "unsupported_parameter"
    assert stack.ollama.meter.arrived == before
