"""Files in chat end to end: a chat or responses request naming an uploaded
file reaches the (fake, recording) upstream with the file's bytes inline —
for the caller's own files only. The official openai SDK is the client."""

from __future__ import annotations

import base64
import io

import openai
import pytest

from tests.keys.e2e import create_key, sdk

CONFIG = """
backends:
  - {{name: a, url: '{url}', models: [m]}}
health: {{enabled: false}}
api_keys: {{mode: blocking}}
server: {{max_body_bytes: 200000}}
"""
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))


@pytest.fixture
def stack(openai_backends, router_factory):
    (backend,) = openai_backends("a")
    return router_factory(CONFIG.format(url=backend.url)), backend


def upload(client: openai.OpenAI, data: bytes, name: str):
    return client.files.create(file=(name, io.BytesIO(data)), purpose="user_data")


def data_url(media: str, data: bytes) -> str:
    return f"data:{media};base64," + base64.b64encode(data).decode()


def test_chat_file_and_image_parts_reach_the_upstream_inline(stack):
    router, backend = stack
    client = sdk(router, create_key(router))
    doc = upload(client, b"%PDF-1.4 tiny", "paper.pdf")
    img = upload(client, PNG, "cat.png")
    out = client.chat.completions.create(
        model="m",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "read these"},
                    {"type": "file", "file": {"file_id": doc.id}},
                    {"type": "file", "file": {"file_id": img.id}},
                ],
            }
        ],
    )
    assert out.choices[0].message.content
    sent = backend.requests[-1].json["messages"][0]["content"]
    assert sent[0] == {"type": "text", "text": "read these"}
    assert sent[1] == {
        "type": "file",
        "file": {"filename": "paper.pdf", "file_data": data_url("application/pdf", b"%PDF-1.4 tiny")},
    }
    assert sent[2] == {"type": "image_url", "image_url": {"url": data_url("image/png", PNG)}}
    assert doc.id not in backend.requests[-1].body.decode()


def test_responses_input_file_and_image_reach_the_upstream_inline(stack):
    router, backend = stack
    client = sdk(router, create_key(router))
    doc = upload(client, b"hello file", "notes.txt")
    img = upload(client, PNG, "cat.png")
    client.responses.create(
        model="m",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_file", "file_id": doc.id},
                    {"type": "input_image", "file_id": img.id, "detail": "low"},
                ],
            }
        ],
    )
    sent = backend.requests[-1].json["input"][0]["content"]
    assert sent[1] == {
        "type": "input_file",
        "filename": "notes.txt",
        "file_data": data_url("text/plain", b"hello file"),
    }
    assert sent[2] == {"type": "input_image", "detail": "low", "image_url": data_url("image/png", PNG)}


def test_another_keys_file_or_an_unknown_id_is_404_naming_it(stack):
    router, backend = stack
    owner, other = sdk(router, create_key(router)), sdk(router, create_key(router))
    doc = upload(owner, b"secret", "s.txt")
    before = len(backend.requests)
    for file_id in (doc.id, "file-000000000000000000000000"):
        with pytest.raises(openai.NotFoundError) as err:
            other.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": [{"type": "file", "file": {"file_id": file_id}}]}],
            )
        assert err.value.body["code"] == "file_not_found"
        assert file_id in err.value.body["message"]
        assert err.value.body["param"] == "messages[0].content[0].file.file_id"
    assert len(backend.requests) == before  # refused before any upstream call


def test_a_file_too_large_to_inline_is_413_before_the_upstream(stack):
    """Inlined, the body would pass server.max_body_bytes (200,000)."""
    router, backend = stack
    client = sdk(router, create_key(router))
    big = upload(client, b"x" * 190_000, "big.txt")
    before = len(backend.requests)
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": [{"type": "file", "file": {"file_id": big.id}}]}]
        )
    assert err.value.status_code == 413
    assert len(backend.requests) == before
