"""Model discovery: a `discover_models` backend's own list (Ollama /api/tags,
OpenAI /v1/models) feeds /v1/models through the probe task."""

import httpx
import openai

from tests.support.routerproc import wait_until


def test_ollama_tags_and_openai_models_feed_v1_models(openai_backends, ollama_servers, router_factory):
    (o,) = ollama_servers("ol", models=("qwen3", "llama3.2"))
    (a,) = openai_backends("a", models=("served-a",))
    router = router_factory(
        f"backends:\n  - {{name: ol, url: '{o.url}', kind: ollama, discover_models: true}}\n"
        f"  - {{name: a, url: '{a.url}', models: [fixed], discover_models: true}}\n"
    )
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="x", max_retries=0)
    assert sorted(m.id for m in client.models.list()) == ["fixed"]
    out = router.manage("shell", "-c", "from node.tasks import probe_backends; print(probe_backends())")
    assert out.returncode == 0, out.stderr
    wait_until(lambda: len(client.models.list().data) == 4, 10, what="discovered models")
    ids = sorted(m.id for m in client.models.list())
    assert "fixed" in ids and "served-a" in ids
    ollama_ids = [i for i in ids if i not in ("fixed", "served-a")]
    assert len(ollama_ids) == 2 and any(i.startswith("qwen3") for i in ollama_ids)
    reply = client.chat.completions.create(model=ollama_ids[0], messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content.startswith("Hello from ol")
    assert o.requests[-1].json["model"] == ollama_ids[0]
    assert httpx.get(router.url + "/v1/models/" + ollama_ids[0]).status_code == 200
