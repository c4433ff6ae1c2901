"""Faults on the request path free what the request acquired (issue 12, defect 1).

A request that fails anywhere between taking a backend slot and answering
gives the slot back: the next request is served, never a 500 page, never a
backend stuck at capacity until restart.
"""

from __future__ import annotations

import httpx

from tests.support.routerproc import wait_until

CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}


def one_backend(url: str, extra: str = "") -> str:
    return f"backends:\n  - {{name: a, url: '{url}', models: [m], capacity: 1{extra}}}\n"


def in_flight(router) -> int:
    return router.status()["backends"][0]["in_flight"]


def test_non_ascii_forwarded_headers_are_not_fatal_and_free_the_slot(openai_backends, router_factory):
    """Raw latin-1 / UTF-8 bytes in forwarded headers never crash the request
    nor leak the slot of a `capacity: 1` backend; values the upstream cannot
    carry as sent are dropped, ASCII ones still go through."""
    (a,) = openai_backends("a")
    router = router_factory(one_backend(a.url))
    bad = [
        {"user-agent": "caf\xe9/1.0".encode("latin-1")},
        {"x-request-id": "réq-ü-🙂".encode()},
    ]
    with httpx.Client(base_url=router.url, timeout=30) as http:
        for headers in bad:
            r = http.post("/v1/chat/completions", json=CHAT, headers=headers)
            assert r.status_code == 200, r.text
            assert r.headers["content-type"].startswith("application/json")
        wait_until(lambda: in_flight(router) == 0, 10, what="slot release")
        r = http.post("/v1/chat/completions", json=CHAT, headers={"user-agent": "plain/1.0"}, timeout=10)
        assert r.status_code == 200, r.text
    sent = [req.headers for req in a.requests if req.method == "POST"]
    assert "user-agent" not in sent[0] or sent[0]["user-agent"].isascii()
    assert "x-request-id" not in sent[1] or sent[1]["x-request-id"].isascii()
    assert sent[2]["user-agent"] == "plain/1.0"
    assert "Traceback" not in router.logs()


def test_url_password_and_api_key_are_served(openai_backends, router_factory):
    """A backend URL with userinfo plus an `api_key` is served on every request:
    the api_key is the Authorization the upstream gets, the password never
    rides in the request line, and the capacity slot is freed each time."""
    (a,) = openai_backends("a")
    url = a.url.replace("http://", "http://user:pw@")
    router = router_factory(one_backend(url, ", api_key: sk-upstream"))
    with httpx.Client(base_url=router.url, timeout=30) as http:
        for _ in range(3):
            r = http.post("/v1/chat/completions", json=CHAT)
            assert r.status_code == 200, r.text
    sent = [req for req in a.requests if req.method == "POST"]
    assert len(sent) == 3
    assert all(req.headers["authorization"] == "Bearer sk-upstream" for req in sent)
    wait_until(lambda: in_flight(router) == 0, 10, what="slot release")


def test_url_password_alone_is_basic_auth(openai_backends, router_factory):
    """Without an api_key, the URL's userinfo is sent as HTTP Basic auth."""
    (a,) = openai_backends("a")
    router = router_factory(one_backend(a.url.replace("http://", "http://user:pw@")))
    r = httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30)
    assert r.status_code == 200, r.text
    (req,) = [req for req in a.requests if req.method == "POST"]
    assert req.headers["authorization"] == "Basic dXNlcjpwdw=="  # user:pw
