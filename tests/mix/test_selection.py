"""Select once, then execute on the selected provider (seed 002 S01, S02; MIX-1/2).

A mixed model group (`mix`) holds a vLLM-kind provider and an Ollama provider
with equal weight. Every request is answered by exactly one provider, the one
its observation names, and no other provider ever sees it.
"""

from __future__ import annotations

from tests.mix.conftest import marker, observation, posts, received, rid
from tests.router.providers.openai_shapes import no_extras


def _chat(client, mark: str, request_id: str, **extra):
    return client.chat.completions.create(
        model="mix",
        messages=[{"role": "user", "content": f"hello {mark}"}],
        extra_headers={"x-request-id": request_id},
        **extra,
    )


def test_each_request_runs_on_the_one_selected_provider(stack):
    """S01: capacity/priority/weights pick one provider per request; that provider,
    and only it, executes the request, on the path its kind implies."""
    client = stack.client()
    seen = {}
    for _ in range(8):
        mark, request_id = marker(), rid()
        before = stack.arrived()
        out = _chat(client, mark, request_id)
        no_extras(out)
        obs = observation(stack.router, request_id)
        provider = obs["provider"]
        seen[provider] = seen.get(provider, 0) + 1
        # The answer comes from the provider the router selected (the fakes sign it).
        assert out.choices[0].message.content.startswith(f"Hello from {provider}.")
        assert out.model == "mix"
        # Dispatched exactly once, to exactly that provider: one upstream request in all.
        assert stack.arrived() == before + 1
        assert obs["attempts"] == 1 and obs["hops"] == []
        if provider == "vllm-a":
            assert (obs["kind"], obs["path"]) == ("vllm", "passthrough")
            assert len(received(stack.vllm, mark)) == 1 and not received(stack.ollama, mark)
        else:
            assert provider == "ollama-o"
            assert (obs["kind"], obs["path"], obs["adapter"]) == ("ollama", "normalized", "ollama")
            assert len(received(stack.ollama, mark)) == 1 and not received(stack.vllm, mark)
    # Equal weights: the Ollama provider is a full member of the group, never excluded.
    assert seen == {"vllm-a": 4, "ollama-o": 4}


def test_ollama_selected_means_native_api_not_a_tunnel(stack):
    """S02: when the Ollama provider is selected, nothing is tunnelled to it: it
    receives a native /api/chat request (converted), never the OpenAI body."""
    client = stack.client()
    done = 0
    for _ in range(6):  # equal weights: Ollama comes up at least every other request
        mark, request_id = marker(), rid()
        stream = _chat(client, mark, request_id, stream=True, stream_options={"include_usage": True})
        chunks = list(stream)
        obs = observation(stack.router, request_id)
        if obs["provider"] != "ollama-o":
            continue
        done += 1
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "Hello from ollama-o. This is a demo reply."
        assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
        for chunk in chunks:
            no_extras(chunk)
        (req,) = received(stack.ollama, mark)
        assert req.path == "/api/chat"
        assert req.json["model"] == "llama3.2"  # the served target, not the group name
        assert req.json["stream"] is True
        assert req.json["messages"] == [{"role": "user", "content": f"hello {mark}"}]
        assert "stream_options" not in req.json  # an OpenAI field Ollama does not know
        assert obs["path"] == "normalized" and obs["served"] == "llama3.2"
    assert done >= 2
    # Every POST the Ollama server ever saw was native; no /v1/* tunnel request.
    assert stack.ollama.meter.paths and set(stack.ollama.meter.paths) <= {"/api/chat", "/api/embed"}
    assert all(r.path.startswith("/api/") for r in posts(stack.ollama))
