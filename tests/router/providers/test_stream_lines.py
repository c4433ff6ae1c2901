"""The OpenAI passthrough renames the model in a stream line by line, through
the shared line decoder (issue 34, defect 2): a line is capped at 16 MiB and
never copied over and over; a stream cut anywhere is relayed byte for byte
with only the served name undone."""

from __future__ import annotations

import httpx
import orjson

from router.providers.framing import MAX_LINE
from tests.router.providers.raw_backend import head
from tests.support.routerproc import wait_until

HUGE = 3 * MAX_LINE  # far more than the router may hold, or a socket buffers
PIECE = 1024 * 1024
EVENT = b'data: {"id":"c1","object":"chat.completion.chunk","model":"m-served","choices":[]}\n\n'


def config(url: str) -> str:
    return (
        f"backends:\n  - {{name: a, url: '{url}', models: [m], served_model: m-served, capacity: 1}}\n"
        "health: {enabled: true, failure_threshold: 1, cooldown: 60}\n"
    )


def endless_line(before: bytes):
    """An SSE answer whose line after `before` is HUGE bytes long."""

    def answer(_body: dict):
        yield head(200, "text/event-stream") + before + b'data: {"model":"m-served","x":"'
        for _ in range(HUGE // PIECE):
            yield b"y" * PIECE
        yield b'"}\n\ndata: [DONE]\n\n'

    return answer


def backend_row(router) -> dict:
    return router.status()["backends"][0]


def test_a_first_line_over_the_cap_is_a_502_and_closes_the_upstream(raw, router_factory):
    """Before the client has a byte, a line past 16 MiB is a failed attempt:
    502 `upstream_bad_response`, counted against the backend; the router
    stops reading at the cap and closes the upstream."""
    backend = raw(endless_line(b""))
    router = router_factory(config(backend.url))
    r = httpx.post(router.url + "/v1/chat/completions", timeout=60,
                   json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 502, r.text[:300]
    assert r.json()["error"]["code"] == "upstream_bad_response"
    assert str(MAX_LINE) in r.json()["error"]["message"]
    wait_until(backend.cut.is_set, 30, what="the router to close the upstream")
    assert backend.written < HUGE  # cut off well before the line's end: not held whole
    wait_until(lambda: backend_row(router)["in_flight"] == 0, 10, what="slot release")
    assert backend_row(router)["healthy"] is False


def test_a_later_line_over_the_cap_ends_the_stream_with_an_error_event(raw, router_factory):
    backend = raw(endless_line(EVENT))
    router = router_factory(config(backend.url))
    with httpx.stream("POST", router.url + "/v1/chat/completions", timeout=60,
                      json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}) as r:
        assert r.status_code == 200
        body = r.read()
    first, _, rest = body.partition(b"\n\n")
    assert first + b"\n\n" == EVENT.replace(b'"m-served"', b'"m"')
    assert rest.startswith(b"data: ") and rest.endswith(b"\n\n") and b"[DONE]" not in rest
    error = orjson.loads(rest[6:])["error"]
    assert error["code"] == "upstream_bad_response" and str(MAX_LINE) in error["message"]
    wait_until(backend.cut.is_set, 30, what="the router to close the upstream")
    assert backend.written < HUGE
    wait_until(lambda: backend_row(router)["in_flight"] == 0, 10, what="slot release")
    assert backend_row(router)["healthy"] is False


def test_a_stream_cut_anywhere_is_relayed_byte_for_byte_with_the_name_undone(raw, router_factory):
    """Pieces that end mid-line, inside a UTF-8 character, between CR and LF,
    inside the served name itself and before the last line's end: the client
    gets the stream exactly, only `"model":"m-served"` (spaced or not) renamed."""
    stream = (
        b': keep-alive\r\n\r\n'
        b'data: {"id":"c1","model":"m-served","choices":[{"delta":{"content":"\xec\x95\x88\xeb\x85\x95"}}]}\r\n\r\n'
        b'data: {"id": "c1", "model": "m-served", "choices": [{"delta": {"content": "\xf0\x9f\x91\x8b m-served"}}]}\n\n'
        b'data: {"id":"c1","model":"m-served","choices":[],"usage":{"total_tokens":3}}\n\n'
        b'data: [DONE]'
    )
    cuts = [
        stream.index(b"\xec\x95\x88") + 1,  # inside a 3-byte character
        stream.index(b"\r\n\r\n", 20) + 1,  # between CR and LF
        stream.index(b'm-served", "choices"') + 3,  # inside the served name
        stream.index(b"\xf0\x9f") + 2,  # inside a 4-byte character
        stream.index(b"total_tokens"),  # mid-line
        len(stream) - 3,  # inside the last, unterminated line
    ]
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    backend = raw(lambda _body: [head(200, "text/event-stream; charset=utf-8"), *pieces])
    router = router_factory(config(backend.url))
    # The client asks for the usage chunk the stream has (else the router,
    # which asked for it, would take it out: test_stream_usage.py).
    r = httpx.post(router.url + "/v1/chat/completions", timeout=30,
                   json={"model": "m", "stream": True, "stream_options": {"include_usage": True},
                         "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 200
    assert r.content == stream.replace(b'"model":"m-served"', b'"model":"m"').replace(
        b'"model": "m-served"', b'"model": "m"'
    )
    assert backend_row(router)["healthy"] is True
