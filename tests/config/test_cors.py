"""CORS for browser clients of /v1 (issue 41, item 2), over real HTTP
against a router process: a preflight as a browser sends it is answered
without a key, an answer to an allowed origin carries the headers the Fetch
standard asks for, a disallowed origin gets none, and the dashboard, the
admin and the probes never get CORS headers. Off by default."""

from __future__ import annotations

import httpx
import pytest

from fakes import openai_backend
from router.config_schema import ConfigError, parse
from router.core.cors import CorsPolicy
from tests.keys.e2e import create_key
from tests.support.routerproc import RouterProc

APP = "https://app.example.com"
CONFIG = """
backends:
  - {{name: a, url: '{url}', models: [m]}}
health: {{enabled: false}}
{extra}
"""
BLOCKING = """
api_keys: {mode: blocking}
cors:
  allow_origins: ['https://app.example.com', 'http://localhost:5173']
  allow_credentials: true
  expose_headers: [x-request-id, retry-after]
  max_age: 300
"""
# What Chrome sends before the openai SDK's POST from a page.
PREFLIGHT = {
    "origin": APP,
    "access-control-request-method": "POST",
    "access-control-request-headers": "authorization,content-type,x-stainless-os,x-stainless-retry-count",
    "sec-fetch-mode": "cors",
    "referer": APP + "/",
}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def cors_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.startswith("access-control-")}


@pytest.fixture(scope="module")
def backend():
    server = openai_backend.server_thread("a", ["m"]).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def blocking(backend):
    proc = RouterProc(CONFIG.format(url=backend.url, extra=BLOCKING)).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def key(blocking):
    return create_key(blocking, name="browser")


def test_a_browser_preflight_is_answered_without_a_key(blocking):
    """204 echoing the origin (credentials: never `*`), the methods, the
    asked headers (a wildcard would not cover Authorization), max-age, and
    Vary: Origin; no key needed although the gate blocks."""
    r = httpx.request("OPTIONS", blocking.url + "/v1/chat/completions", headers=PREFLIGHT, timeout=10)
    assert r.status_code == 204, r.text
    assert cors_headers(r) == {
        "access-control-allow-origin": APP,
        "access-control-allow-credentials": "true",
        "access-control-allow-methods": "GET, POST",
        "access-control-allow-headers": PREFLIGHT["access-control-request-headers"],
        "access-control-max-age": "300",
    }
    assert r.headers["vary"] == "Origin"
    assert r.content == b""


def test_an_allowed_origins_answers_carry_cors_headers(blocking, key):
    """The answer, a stream, and a refusal (so the page can read the error)."""
    origin = {"origin": "http://localhost:5173"}
    ok = httpx.post(
        blocking.url + "/v1/chat/completions",
        json=CHAT,
        timeout=30,
        headers={**origin, "authorization": f"Bearer {key}"},
    )
    assert ok.status_code == 200
    assert cors_headers(ok) == {
        "access-control-allow-origin": "http://localhost:5173",
        "access-control-allow-credentials": "true",
        "access-control-expose-headers": "x-request-id, retry-after",
    }
    assert "Origin" in ok.headers.get_list("vary")
    with httpx.stream(
        "POST",
        blocking.url + "/v1/chat/completions",
        json={**CHAT, "stream": True},
        timeout=30,
        headers={**origin, "authorization": f"Bearer {key}"},
    ) as streamed:
        assert streamed.status_code == 200
        assert streamed.headers["access-control-allow-origin"] == "http://localhost:5173"
        assert b"[DONE]" in streamed.read()
    models = httpx.get(blocking.url + "/v1/models", headers={**origin, "authorization": f"Bearer {key}"})
    assert models.status_code == 200 and models.headers["access-control-allow-origin"] == "http://localhost:5173"
    refused = httpx.post(blocking.url + "/v1/chat/completions", json=CHAT, headers=origin, timeout=30)
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == "http://localhost:5173"


def test_a_disallowed_origin_gets_no_cors_headers(blocking, key):
    """Its preflight is a 403 naming the origin; its answer has no CORS
    header (the browser withholds it) but still varies by Origin. A method
    or a header not allowed is refused too."""
    evil = {**PREFLIGHT, "origin": "https://evil.example.com"}
    r = httpx.request("OPTIONS", blocking.url + "/v1/chat/completions", headers=evil, timeout=10)
    assert r.status_code == 403 and r.json()["error"]["code"] == "cors_not_allowed"
    assert "https://evil.example.com" in r.json()["error"]["message"]
    assert cors_headers(r) == {}
    answer = httpx.post(
        blocking.url + "/v1/chat/completions",
        json=CHAT,
        timeout=30,
        headers={"origin": "https://evil.example.com", "authorization": f"Bearer {key}"},
    )
    assert answer.status_code == 200 and cors_headers(answer) == {}
    assert answer.headers["vary"] == "Origin"
    put = httpx.request(
        "OPTIONS",
        blocking.url + "/v1/models",
        timeout=10,
        headers={**PREFLIGHT, "access-control-request-method": "PUT"},
    )
    assert put.status_code == 403 and "'PUT'" in put.json()["error"]["message"]


def test_the_dashboard_admin_and_probes_never_get_cors_headers(blocking):
    """Only /v1 is shared with other origins."""
    for path in ("/dashboard/", "/admin/login/", "/readyz", "/livez", "/status", "/"):
        for method in ("GET", "OPTIONS"):
            r = httpx.request(method, blocking.url + path, headers=PREFLIGHT, timeout=10)
            assert cors_headers(r) == {}, (method, path, r.status_code)
            assert "Origin" not in r.headers.get_list("vary"), (method, path)


def test_cors_is_off_by_default(backend, router_factory):
    """No `cors` section: an OPTIONS is the 405 it always was, no answer has
    a CORS header."""
    proc = router_factory(CONFIG.format(url=backend.url, extra=""))
    r = httpx.request("OPTIONS", proc.url + "/v1/chat/completions", headers=PREFLIGHT, timeout=10)
    assert r.status_code == 405 and cors_headers(r) == {}
    answer = httpx.post(proc.url + "/v1/chat/completions", json=CHAT, headers={"origin": APP}, timeout=30)
    assert answer.status_code == 200 and cors_headers(answer) == {} and "vary" not in answer.headers


def test_any_origin_without_credentials_is_a_star(backend, router_factory):
    """`*` without credentials: `Access-Control-Allow-Origin: *`, nothing to vary."""
    proc = router_factory(CONFIG.format(url=backend.url, extra="cors: {allow_origins: ['*']}"))
    r = httpx.request("OPTIONS", proc.url + "/v1/chat/completions", headers=PREFLIGHT, timeout=10)
    assert r.status_code == 204 and r.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in r.headers and "vary" not in r.headers
    answer = httpx.post(proc.url + "/v1/chat/completions", json=CHAT, headers={"origin": APP}, timeout=30)
    assert answer.headers["access-control-allow-origin"] == "*" and "vary" not in answer.headers


# -- the policy and its YAML ---------------------------------------------------


def policy(**kw) -> CorsPolicy:
    base = dict(
        allow_origins=["*"],
        allow_methods=["GET", "POST"],
        allow_headers=["*"],
        expose_headers=[],
        max_age=600,
        allow_credentials=False,
    )
    built = CorsPolicy.build(**{**base, **kw})
    assert built is not None
    return built


def test_star_with_credentials_echoes_the_origin():
    """The Fetch standard: with credentials `*` is no wildcard."""
    p = policy(allow_credentials=True)
    assert dict(p.on_answer(b"https://x.example"))[b"access-control-allow-origin"] == b"https://x.example"
    assert (b"vary", b"Origin") in p.on_answer(b"https://x.example")


def test_listed_headers_are_checked_case_blind():
    p = policy(allow_headers=["Authorization", "Content-Type"])
    assert p.refusal(b"https://x.example", b"POST", b"content-type, AUTHORIZATION") is None
    assert "x-other" in (p.refusal(b"https://x.example", b"POST", b"content-type, x-other") or "")
    assert dict(p.on_preflight(b"https://x.example", b"x-other"))[b"access-control-allow-headers"] == (
        b"authorization, content-type"
    )


def test_no_origins_is_no_policy():
    assert (
        CorsPolicy.build(
            allow_origins=[],
            allow_methods=["GET"],
            allow_headers=[],
            expose_headers=[],
            max_age=1,
            allow_credentials=False,
        )
        is None
    )


@pytest.mark.parametrize(
    ("origins", "error"),
    [
        ("['https://app.example.com/']", "no trailing slash"),
        ("['app.example.com']", "not an origin"),
        ("['null']", "'null'"),
    ],
)
def test_a_bad_origin_is_refused_at_load(origins, error):
    with pytest.raises(ConfigError) as refused:
        parse(f"cors: {{allow_origins: {origins}}}\n", source="router.yaml")
    assert "cors.allow_origins" in str(refused.value) and error in str(refused.value)


def test_origins_are_compared_in_lower_case():
    model, _ = parse("cors: {allow_origins: ['HTTPS://App.Example.com:8443']}\n")
    assert model.cors.allow_origins == ["https://app.example.com:8443"]
