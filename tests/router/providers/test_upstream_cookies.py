"""The upstream client keeps no cookies (router/providers/http.py,
LeanAiohttpTransport.get_client): one client's upstream session never rides
on another client's request. Real router process, real fake backend."""

from __future__ import annotations

import httpx

CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}


def posts(server):
    return [r for r in server.requests if r.method == "POST"]


def test_an_upstream_cookie_is_never_sent_on_another_request(openai_backends, router_factory):
    """The upstream connection pool is shared by every client: a Set-Cookie
    one answer carries must not come back on the next client's request. (By
    host name: a cookie jar refuses cookies of a bare IP address anyway.)"""
    (a,) = openai_backends("a")
    url = a.url.replace("127.0.0.1", "localhost")
    router = router_factory(f"backends:\n  - {{name: a, url: '{url}', models: [m]}}\nhealth: {{enabled: false}}\n")
    a.behavior.status = 400
    a.behavior.error_headers = {"Set-Cookie": "session=one-client; Path=/"}
    assert httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30).status_code == 400
    a.behavior.reset()
    assert httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30).status_code == 200
    first, second = posts(a)[-2:]
    assert "cookie" not in first.headers and "cookie" not in second.headers
