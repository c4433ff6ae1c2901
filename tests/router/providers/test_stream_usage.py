"""Every stream is counted (issue 41, item 7): the OpenAI passthrough asks an
OpenAI-compatible upstream for usage on a stream whose client did not
(`stream_options.include_usage`), counts it against the key, and hands the
client the stream it would have got: no `"usage":null` on its chunks, no
usage chunk. Pure parts first, then the official openai SDK through a real
router to the fake OpenAI backend."""

from __future__ import annotations

import csv
import io
import re

import httpx
import orjson
import pytest
import redis

from fakes import openai_backend
from router.providers.framing import Lines
from router.providers.stream_usage import UsageTaken, asked_body, asks
from tests.keys.e2e import create_key, sdk
from tests.support.routerproc import RouterProc, wait_until

CHUNK = b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"%s"}}]%s}\n\n'
USAGE = b'data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n'
DONE = b"data: [DONE]\n\n"


def stream(asked: bool, *, crlf: bool = False, nulls: bool = True) -> bytes:
    """A two-chunk stream as an upstream sends it, asked for usage or not;
    asked, OpenAI puts `"usage":null` on every chunk (`nulls`), vLLM's Chat
    Completions leaves the key out (pydantic's exclude_unset)."""
    null = b',"usage":null' if asked and nulls else b""
    out = CHUNK % (b"Hel", null) + CHUNK % (b'lo \\"usage\\":null,\\"usage\\"', null)
    out += (USAGE if asked else b"") + DONE
    return out.replace(b"\n", b"\r\n") if crlf else out


def taken_through(data: bytes, cut: int) -> tuple[bytes, dict | None]:
    """`data` fed to Lines + UsageTaken in pieces of `cut` bytes, as the relay does."""
    lines, taken, out = Lines(), UsageTaken(), b""
    for i in range(0, len(data), cut):
        out += taken(lines.feed(data[i : i + cut]))
    out += taken(lines.rest())
    return out, taken.usage


@pytest.mark.parametrize("nulls", [True, False], ids=["openai", "vllm-chat"])
@pytest.mark.parametrize("crlf", [False, True])
def test_the_asked_stream_becomes_the_unasked_one_however_it_is_cut(crlf, nulls):
    """Whatever the chunking, the client gets the unasked stream byte for
    byte and the usage is read, even with `"usage":null` inside the content."""
    asked, unasked = stream(True, crlf=crlf, nulls=nulls), stream(False, crlf=crlf)
    for cut in range(1, len(asked) + 1):
        out, usage = taken_through(asked, cut)
        assert out == unasked, cut
        assert usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def test_a_usage_object_in_a_chunk_with_choices_is_read_and_left_alone():
    """A server that always reports usage in its last content chunk: the
    client would have seen it anyway, so it stays; it is still counted."""
    last = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":1}}\n\n'
    out, usage = taken_through(CHUNK % (b"x", b"") + last + DONE, 7)
    assert out == CHUNK % (b"x", b"") + last + DONE
    assert usage == {"prompt_tokens": 1}


@pytest.mark.parametrize(
    ("body", "endpoint", "stream", "expected"),
    [
        ({}, "chat/completions", True, True),
        ({}, "completions", True, True),
        ({"stream_options": None}, "chat/completions", True, True),
        ({"stream_options": {"include_usage": False}}, "chat/completions", True, True),
        ({"stream_options": {"include_usage": True}}, "chat/completions", True, False),
        ({"stream_options": {"continuous_usage_stats": True}}, "chat/completions", True, False),
        ({"stream_options": "yes"}, "chat/completions", True, False),
        ({}, "chat/completions", False, False),
        ({}, "responses", True, False),
        ({}, "embeddings", False, False),
    ],
)
def test_when_the_router_asks(body, endpoint, stream, expected):
    """Only a Chat Completions or Completions stream whose client did not ask."""
    assert asks(body, endpoint, stream) is expected


def test_the_asked_body_keeps_the_clients_bytes():
    """The field is appended to the client's own bytes (spacing, key order and
    numbers as sent); only a body that needs more is dumped again."""
    raw = b'{"model": "m",  "stream": true, "temperature": 1.50, "messages": []}  \n'
    body = orjson.loads(raw)
    assert asked_body(raw, body, "m") == raw.rstrip()[:-1] + b',"stream_options":{"include_usage":true}}'
    renamed = orjson.loads(asked_body(raw, body, "m-served"))
    assert renamed["model"] == "m-served" and renamed["stream_options"] == {"include_usage": True}
    options = {**body, "stream_options": {"include_usage": False, "include_obfuscation": False}}
    again = orjson.loads(asked_body(orjson.dumps(options), options, "m"))
    assert again["stream_options"] == {"include_usage": True, "include_obfuscation": False}


# -- end to end ---------------------------------------------------------------

CONFIG = """
backends:
  - {{name: a, url: '{url}', models: [m]}}
health: {{enabled: false}}
api_keys: {{mode: blocking}}
{extra}
"""
IDS = re.compile(rb'"(id|created|system_fingerprint)":("[^"]*"|\d+|null)')


@pytest.fixture(scope="module")
def backend():
    server = openai_backend.server_thread("a", ["m"]).start()
    yield server
    server.stop()


@pytest.fixture
def router(backend):
    procs: list[RouterProc] = []

    def make(extra: str = "") -> RouterProc:
        proc = RouterProc(CONFIG.format(url=backend.url, extra=extra)).start()
        procs.append(proc)
        return proc

    yield make
    for proc in procs:
        proc.stop()
        client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
        keys = list(client.scan_iter(match=proc.prefix + "*"))
        if keys:
            client.delete(*keys)


def key_usage(proc: RouterProc) -> dict[str, list[int]]:
    out = proc.manage("keyusage", "--csv")
    assert out.returncode == 0, out.stderr
    totals: dict[str, list[int]] = {}
    for r in csv.DictReader(io.StringIO(out.stdout)):
        t = totals.setdefault(r["name"], [0, 0, 0])
        for i, col in enumerate(("requests", "prompt_tokens", "completion_tokens")):
            t[i] += int(r[col])
    return totals


def raw_stream(url: str, body: dict, key: str | None = None) -> bytes:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as r:
        assert r.status_code == 200, r.read()
        return b"".join(r.iter_raw())


@pytest.mark.parametrize("endpoint", ["chat/completions", "completions"])
def test_a_stream_without_include_usage_is_counted_and_relayed_unchanged(router, backend, endpoint):
    """The client's stream is byte for byte what the backend sends a client
    that did not ask (ids and timestamps aside), the backend was asked for
    usage, and the key's usage holds the tokens of the usage chunk."""
    proc = router()
    key = create_key(proc, name="streamer")
    body = {"model": "m", "stream": True, "max_tokens": 3}
    body |= (
        {"messages": [{"role": "user", "content": "count me"}]}
        if endpoint == "chat/completions"
        else {"prompt": "count me"}
    )
    direct = raw_stream(f"{backend.url}/v1/{endpoint}", body)
    assert b'"usage"' not in direct  # what an unasked backend sends
    backend.requests.clear()
    relayed = raw_stream(f"{proc.url}/v1/{endpoint}", body, key)
    assert IDS.sub(b"", relayed) == IDS.sub(b"", direct)
    sent = backend.requests[-1].json
    assert sent["stream_options"] == {"include_usage": True}
    asked = raw_stream(f"{backend.url}/v1/{endpoint}", sent)
    usage = orjson.loads(asked.split(b"data: ")[-2])["usage"]
    assert usage["completion_tokens"] == 3
    wait_until(
        lambda: key_usage(proc).get("streamer") == [1, usage["prompt_tokens"], 3],
        30,
        what="the stream's tokens in the key's usage",
    )


def test_the_official_sdk_sees_no_usage_it_did_not_ask_for(router, backend):
    """openai SDK streams: without include_usage every chunk has choices and
    no usage, and the tokens are counted; with it, the client gets its usage
    chunk as before (the router asked nothing more), counted once."""
    proc = router()
    key = create_key(proc, name="sdk")
    client = sdk(proc, key)
    messages = [{"role": "user", "content": "hi"}]
    chunks = list(client.chat.completions.create(model="m", messages=messages, stream=True))
    assert chunks and all(c.choices and c.usage is None for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks).startswith("Hello from a.")
    assert "usage" not in chunks[0].model_dump(exclude_unset=True)
    wait_until(lambda: (key_usage(proc).get("sdk") or [0])[0] == 1, 30, what="the first stream counted")
    first = key_usage(proc)["sdk"]
    assert first[1] > 0 and first[2] > 0

    backend.requests.clear()
    asked = list(
        client.chat.completions.create(
            model="m", messages=messages, stream=True, stream_options={"include_usage": True}
        )
    )
    assert backend.requests[-1].json["stream_options"] == {"include_usage": True}
    assert asked[-1].choices == [] and asked[-1].usage is not None
    assert all(c.usage is None for c in asked[:-1])
    wait_until(lambda: key_usage(proc)["sdk"] == [2, 2 * first[1], 2 * first[2]], 30, what="both counted once")


def test_stream_usage_false_leaves_the_request_as_the_client_sent_it(router, backend):
    """`stream_usage: false`: the upstream gets the client's body unchanged
    (for a server that refuses stream_options), and the stream counts no tokens."""
    proc = router("stream_usage: false")
    key = create_key(proc, name="off")
    backend.requests.clear()
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    raw_stream(f"{proc.url}/v1/chat/completions", body, key)
    assert "stream_options" not in backend.requests[-1].json
    wait_until(lambda: (key_usage(proc).get("off") or [0])[0] == 1, 30, what="the request counted")
    assert key_usage(proc)["off"] == [1, 0, 0]
