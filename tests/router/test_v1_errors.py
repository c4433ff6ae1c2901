"""Every /v1 answer is an error the client can parse (issue 12, defects 10, 11, 13).

- any method a path does not serve → 405 `method_not_allowed` + `Allow`;
  any path not served (a trailing slash included) → 404 `not_found`;
  OpenAI-shaped, Anthropic-shaped under /v1/messages; never HTML;
- a top-level key given twice → 400 `duplicate_key`, nothing dispatched;
- a Content-Type other than JSON → 415; none at all is JSON;
- a 5xx is logged once: the request's observation, not Django's logger too.
"""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.support.routerproc import wait_until

CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
INFERENCE = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")


@pytest.fixture(scope="module")
def routed():
    from fakes import openai_backend
    from tests.support.routerproc import RouterProc

    backend = openai_backend.server_thread("a", ["m", "allowed-m"]).start()
    router = RouterProc(f"backends:\n  - {{name: a, url: '{backend.url}', models: [m, allowed-m]}}\n").start()
    yield router, backend
    router.stop()
    backend.stop()


def openai_error(r: httpx.Response) -> dict:
    assert r.headers["content-type"] == "application/json", (r.headers, r.text)
    if r.request.method == "HEAD":
        return {}
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def posts(backend) -> int:
    return sum(1 for r in backend.requests if r.method == "POST")


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "TRACE", "GET", "PUT", "PATCH", "DELETE", "PROPFIND"])
@pytest.mark.parametrize("path", INFERENCE)
def test_other_methods_on_inference_paths_are_openai_405(routed, method, path):
    router, _ = routed
    r = httpx.request(method, router.url + path, timeout=10)
    assert r.status_code == 405
    assert r.headers["allow"] == "POST"
    err = openai_error(r)
    assert not err or (err["code"] == "method_not_allowed" and method in err["message"])


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "TRACE", "POST", "PUT", "DELETE"])
@pytest.mark.parametrize("path", ["/v1/models", "/v1/models/m"])
def test_other_methods_on_models_are_openai_405(routed, method, path):
    router, _ = routed
    r = httpx.request(method, router.url + path, timeout=10)
    assert r.status_code == 405
    assert r.headers["allow"] == "GET"
    err = openai_error(r)
    assert not err or err["code"] == "method_not_allowed"


@pytest.mark.parametrize(
    "method, path, hint",
    [
        ("GET", "/v1/models/", "/v1/models?"),
        ("POST", "/v1/chat/completions/", "/v1/chat/completions?"),
        ("POST", "/v1/embeddings/x", None),
        ("OPTIONS", "/v1/nothing", None),
        ("GET", "/v1/", None),
    ],
)
def test_unserved_paths_are_openai_404(routed, method, path, hint):
    router, _ = routed
    r = httpx.request(method, router.url + path, json=CHAT if method == "POST" else None, timeout=10)
    assert r.status_code == 404
    err = openai_error(r)
    assert err["code"] == "not_found"
    if hint:
        assert hint in err["message"]


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "TRACE", "GET"])
def test_messages_path_stays_anthropic_shaped(routed, method):
    router, _ = routed
    r = httpx.request(method, router.url + "/v1/messages", timeout=10)
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.headers["content-type"] == "application/json"
    if method != "HEAD":
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(router.url + "/v1/messages/", json={}, timeout=10)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model":"x","model":"allowed-m","messages":[{"role":"user","content":"x"}]}',
        b'{"model":"x","messages":[{"role":"user","content":"x"}],"mod\\u0065l":"allowed-m"}',
        b'{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}],"stream":false}',
    ],
    ids=["model", "escaped", "stream"],
)
def test_duplicate_top_level_keys_are_400(routed, raw):
    router, backend = routed
    before = posts(backend)
    r = httpx.post(router.url + "/v1/chat/completions", content=raw,
                   headers={"content-type": "application/json"}, timeout=10)
    assert r.status_code == 400, r.text
    err = openai_error(r)
    assert err["code"] == "duplicate_key" and err["param"] in {"model", "stream"}
    assert posts(backend) == before


def test_duplicate_keys_on_messages_are_anthropic_400(routed):
    router, backend = routed
    before = posts(backend)
    raw = b'{"model":"x","max_tokens":5,"model":"m","messages":[{"role":"user","content":"x"}]}'
    r = httpx.post(router.url + "/v1/messages", content=raw, headers={"content-type": "application/json"},
                   timeout=10)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error" and "'model'" in r.json()["error"]["message"]
    assert posts(backend) == before


def test_repeated_names_below_the_top_level_are_fine(routed):
    """Nested objects may reuse top-level names; the body is served as sent."""
    router, _ = routed
    body = {**CHAT, "metadata": {"model": "other", "note": "a\nb"},
            "messages": [{"role": "user", "content": '"model": "x"'}]}
    r = httpx.post(router.url + "/v1/chat/completions", content=orjson.dumps(body),
                   headers={"content-type": "application/json"}, timeout=10)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_non_json_content_type_is_415(routed, content_type):
    router, backend = routed
    before = posts(backend)
    for path in ("/v1/chat/completions", "/v1/messages"):
        r = httpx.post(router.url + path, content=orjson.dumps({**CHAT, "max_tokens": 5}),
                       headers={"content-type": content_type}, timeout=10)
        assert r.status_code == 415, r.text
        assert "application/json" in r.text
    assert posts(backend) == before


@pytest.mark.parametrize("content_type", [None, "application/json", "application/json; charset=utf-8",
                                          "Application/JSON", "application/vnd.api+json"])
def test_json_or_missing_content_type_is_served(routed, content_type):
    router, _ = routed
    headers = {} if content_type is None else {"content-type": content_type}
    r = httpx.post(router.url + "/v1/chat/completions", content=orjson.dumps(CHAT), headers=headers, timeout=10)
    assert r.status_code == 200, r.text


def test_a_5xx_is_logged_once(openai_backends, router_factory):
    """A 502 leaves the request's observation line, and no second line from
    Django's request logger."""
    (a,) = openai_backends("a")
    router = router_factory(
        f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\nretry: {{max_attempts: 1}}\n"
    )
    a.stop()
    r = httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30)
    assert r.status_code == 502, r.text

    def observed() -> list[dict]:
        lines = [orjson.loads(x) for x in router.logs().splitlines() if x.startswith("{")]
        return [x for x in lines if x.get("msg") == "request" and x.get("obs", {}).get("status") == 502]

    wait_until(observed, 10, what="the request's observation line")
    logged = [x for x in router.logs().splitlines() if "Bad Gateway" in x or '"django.request"' in x]
    assert logged == []
