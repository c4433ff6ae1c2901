"""Bad input: each is a clear OpenAI-shaped error, nothing crashes, nothing leaks."""

from __future__ import annotations

import httpx
import openai
import pytest

BIG = 64 * 1024


@pytest.fixture(scope="module")
def routed():
    from fakes import openai_backend
    from tests.support.routerproc import RouterProc

    backend = openai_backend.server_thread("a", ["m"]).start()
    router = RouterProc(
        f"backends:\n  - {{name: a, url: '{backend.url}', models: [m]}}\nserver: {{max_body_bytes: {BIG}}}\n"
    ).start()
    yield router, backend
    router.stop()
    backend.stop()


def error_of(r: httpx.Response) -> dict:
    assert r.headers["content-type"].startswith("application/json"), r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert "Traceback" not in r.text
    return body["error"]


@pytest.mark.parametrize(
    "content,status,code,param",
    [
        (b"{not json", 400, "invalid_json", None),
        (b"", 400, "invalid_json", None),
        (b"[1, 2]", 400, "invalid_request", None),
        (b'{"messages": [{"role": "user", "content": "x"}]}', 400, "missing_model", "model"),
        (b'{"model": 5, "messages": []}', 400, "invalid_request", "model"),
        (b'{"model": "m", "messages": "hi"}', 400, "invalid_request", "messages"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}', 400, "invalid_request", "stream"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}', 400, "invalid_request", "temperature"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5}', 400, "invalid_request", "max_tokens"),
        (b'{"model": "m", "messages": [{"role": "user"}], "metadata": {"iop_response_mode": "normalized"}}', 400, "invalid_request", "metadata.iop_response_mode"),
        (b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}', 404, "model_not_found", "model"),
        (b'\xff\xfe garbage', 400, "invalid_json", None),
    ],
)
def test_bad_bodies(routed, content, status, code, param):
    router, backend = routed
    before = len(backend.requests)
    r = httpx.post(router.url + "/v1/chat/completions", content=content, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    err = error_of(r)
    assert err["code"] == code
    assert err["param"] == param
    assert len(backend.requests) == before  # nothing was dispatched


def test_body_over_limit_is_413(routed):
    router, _backend = routed
    payload = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * (BIG * 2) + b'"}]}'
    r = httpx.post(router.url + "/v1/chat/completions", content=payload, headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert error_of(r)["code"] == "request_too_large"


def test_unknown_paths_and_methods(routed):
    router, _ = routed
    r = httpx.get(router.url + "/v1/nothing/here")
    assert r.status_code == 404 and error_of(r)["code"] == "not_found"
    r = httpx.get(router.url + "/v1/chat/completions")
    assert r.status_code == 405 and error_of(r)["code"] == "method_not_allowed"
    r = httpx.post(router.url + "/v1/models", json={})
    assert r.status_code == 405 and error_of(r)["code"] == "method_not_allowed"
    r = httpx.get(router.url + "/definitely-not-here")
    assert r.status_code == 404 and error_of(r)["code"] == "not_found"


def test_sdk_sees_typed_errors_and_router_survives(routed):
    router, _ = routed
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="ghost", messages=[{"role": "user", "content": "x"}])
    assert err.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=[])
    # Still serving after all of the above.
    out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert out.choices[0].message.content
    assert "Traceback" not in router.logs()


def test_chunked_body_over_limit_is_refused_while_reading(routed):
    """Without a Content-Length the limit still holds: reading stops at the limit."""
    router, backend = routed
    before = len(backend.requests)

    def body():
        yield b'{"model": "m", "messages": [{"role": "user", "content": "'
        for _ in range(64):
            yield b"x" * 4096
        yield b'"}]}'

    r = httpx.post(router.url + "/v1/chat/completions", content=body(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert error_of(r)["code"] == "request_too_large"
    assert len(backend.requests) == before
