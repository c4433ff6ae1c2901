"""A 2xx answer that is not what the endpoint promises is an upstream failure,
never a success (issue 34, defect 8): a content type that does not match the
request (SSE for `stream: true`, JSON otherwise), a body that is not JSON, an
answer cut short (broken chunked framing, a Content-Length the body never
reaches). Before the client has a byte it is a failed attempt — retried on
another replica, else 502 `upstream_bad_response` — and it counts against
the backend's health; a whole answer already being relayed is cut off, never
ended as if complete."""

from __future__ import annotations

import httpx
import pytest

from tests.router.providers.raw_backend import chunk, completion, head

CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
HTML = b"<html><body>Bad gateway, but with a smile</body></html>"
BIG = 512 * 1024  # more than the passthrough reads whole (RELAY_OVER): relayed as it comes


def config(url: str, *, served: str | None = None, extra: str = "") -> str:
    rename = f", served_model: {served}" if served else ""
    return (
        f"backends:\n  - {{name: a, url: '{url}', models: [m]{rename}}}\n{extra}"
        "health: {enabled: true, failure_threshold: 1, cooldown: 60}\n"
    )


def bad_response(r: httpx.Response) -> dict:
    assert r.status_code == 502, r.text
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert error["code"] == "upstream_bad_response" and error["type"] == "server_error"
    return error


def healthy(router) -> bool:
    return router.status()["backends"][0]["healthy"]


def test_an_html_page_with_200_is_a_502_and_counts_against_the_backend(raw, router_factory):
    backend = raw(lambda _body: [head(200, "text/html", length=len(HTML)), HTML])
    router = router_factory(config(backend.url))
    error = bad_response(httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30))
    assert "text/html" in error["message"]
    assert healthy(router) is False


def test_a_json_type_over_a_body_that_is_not_json_is_a_502(raw, router_factory):
    backend = raw(lambda _body: [head(200, "application/json", length=len(HTML)), HTML])
    router = router_factory(config(backend.url))
    bad_response(httpx.post(router.url + "/v1/embeddings", json={"model": "m", "input": "x"}, timeout=30))
    assert healthy(router) is False


def test_a_stream_request_answered_with_json_is_a_502_not_json_then_an_sse_error(raw, router_factory):
    short = completion("m")[:-20]  # and cut short, as the issue found it
    backend = raw(lambda _body: [head(200, "application/json"), short])
    router = router_factory(config(backend.url))
    r = httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=30)
    error = bad_response(r)
    assert "application/json" in error["message"] and b"data:" not in r.content
    assert healthy(router) is False


def test_a_whole_request_answered_with_sse_is_a_502(raw, router_factory):
    events = b'data: {"choices":[]}\n\ndata: [DONE]\n\n'
    backend = raw(lambda _body: [head(200, "text/event-stream", length=len(events)), events])
    router = router_factory(config(backend.url))
    bad_response(httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30))
    assert healthy(router) is False


def test_a_bad_answer_is_retried_on_another_replica(raw, openai_backends, router_factory):
    bad = raw(lambda _body: [head(200, "text/html", length=len(HTML)), HTML])
    (good,) = openai_backends("b")
    router = router_factory(
        f"backends:\n  - {{name: a, url: '{bad.url}', models: [m]}}\n  - {{name: b, url: '{good.url}', models: [m]}}\n"
        "health: {enabled: true, failure_threshold: 1, cooldown: 60}\nretry: {max_attempts: 3, backoff: 0}\n"
    )
    with httpx.Client(base_url=router.url, timeout=30) as http:
        for stream in (False, True, False, True):
            r = http.post("/v1/chat/completions", json={**CHAT, "stream": stream})
            assert r.status_code == 200, r.text
    assert bad.posts == 1  # tried once, then its breaker opened
    assert len([x for x in good.requests if x.method == "POST"]) == 4


def test_a_broken_chunked_body_held_for_the_rename_is_a_502(raw, router_factory):
    body = completion("m-served")
    backend = raw(lambda _body: [head(200, "application/json", chunked=True), chunk(body[:40]), b"zz\r\n"])
    router = router_factory(config(backend.url, served="m-served"))
    bad_response(httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30))
    assert healthy(router) is False


def test_a_content_length_the_body_never_reaches_is_a_502(raw, router_factory):
    body = completion("m")
    backend = raw(lambda _body: [head(200, "application/json", length=len(body) + 100), body])
    router = router_factory(config(backend.url))
    bad_response(httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30))
    assert healthy(router) is False


@pytest.mark.parametrize("framing", ["chunked", "length"])
def test_a_relayed_whole_answer_cut_short_is_cut_for_the_client_too(framing, raw, router_factory):
    """Relayed as it comes (long, nothing to rename), the answer's status is
    sent before its end is known; cut short, its client must see it cut (no
    last chunk), never a complete 200 — and the backend's health knows."""
    body = completion("m", "y" * BIG)
    cut = len(body) // 2
    if framing == "chunked":  # a body cut inside a chunk: no last chunk, ever
        pieces = [head(200, "application/json", chunked=True), chunk(body[:cut]), b"%x\r\n" % cut, body[cut:][:100]]
    else:
        pieces = [head(200, "application/json", length=len(body)), body[:cut]]
    backend = raw(lambda _body: pieces)
    router = router_factory(config(backend.url))
    with httpx.stream("POST", router.url + "/v1/chat/completions", json=CHAT, timeout=30) as r:
        assert r.status_code == 200
        with pytest.raises(httpx.RemoteProtocolError):
            r.read()
    assert healthy(router) is False
    assert "Traceback" not in router.logs()
