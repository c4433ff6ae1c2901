"""The web process's limits (config/server.py): request heads and admission.

Real router processes (uvicorn, daphne), real sockets, a real fake backend.
"""

from __future__ import annotations

import select
import socket
import time

import httpx
import pytest

from config.server import Limits, headers_over_limit, limits_from
from fakes import openai_backend
from fakes.server import Behavior
from tests.support.routerproc import RouterProc, wait_until

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def config_for(backend) -> str:
    return f"backends:\n  - {{name: a, url: '{backend.url}', models: [m]}}\nhealth: {{enabled: false}}\n"


@pytest.fixture(scope="module")
def backend():
    server = openai_backend.server_thread("a", ["m"], behavior=Behavior()).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def uvicorn_router(backend):
    router = RouterProc(config_for(backend)).start()
    yield router
    router.stop()


def assert_headers_refused(r: httpx.Response) -> None:
    assert r.status_code == 431, r.text
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "request_headers_too_large"


def rss_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def send_big_head(port: int, header_bytes: int) -> bytes:
    """Send a request whose headers are `header_bytes` of 1 KB headers, in
    64 KB pieces, stopping as soon as the server answers; return its answer."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        head = b"GET /v1/models HTTP/1.1\r\nhost: x\r\n"
        line = b"x-pad-%06d: " + b"a" * 1000 + b"\r\n"
        blob = b"".join(line % i for i in range(header_bytes // len(line))) + b"\r\n"
        data = head + blob
        sent = 0
        while sent < len(data):
            try:
                sent += sock.send(data[sent:sent + 65536])
            except (BrokenPipeError, ConnectionResetError):
                break
            if select.select([sock], [], [], 0.01)[0]:
                break
        answer = b""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
            if b"\r\n\r\n" in answer and answer.split(b"\r\n\r\n", 1)[1].endswith(b"}"):
                break
        return answer
    finally:
        sock.close()


def test_too_many_headers_are_refused_by_uvicorn_with_431(uvicorn_router):
    """101 small headers (default limit 100) → 431, OpenAI-shaped."""
    headers = {f"x-h{i}": "1" for i in range(101)}
    assert_headers_refused(httpx.get(uvicorn_router.url + "/v1/models", headers=headers))
    ok = {f"x-h{i}": "1" for i in range(90)}
    assert httpx.get(uvicorn_router.url + "/v1/models", headers=ok).status_code == 200


def test_headers_over_the_byte_limit_are_refused_with_431(uvicorn_router):
    """40 headers of 1 KB (over the 32 KiB default) → 431; 20 of them pass."""
    big = {f"x-h{i}": "a" * 1024 for i in range(40)}
    assert_headers_refused(httpx.get(uvicorn_router.url + "/v1/models", headers=big))
    fine = {f"x-h{i}": "a" * 1024 for i in range(20)}
    assert httpx.get(uvicorn_router.url + "/v1/models", headers=fine).status_code == 200


def test_a_huge_head_is_cut_off_while_parsing_and_memory_stays_flat(uvicorn_router):
    """The issue's probe: 20,000 × 1 KB headers, five times. Each is refused
    with 431 while still arriving, and the web process does not grow."""
    before = rss_kb(uvicorn_router.proc.pid)
    for _ in range(5):
        answer = send_big_head(uvicorn_router.port, 20_000 * 1024)
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
        assert b'"request_headers_too_large"' in answer
    grew_mb = (rss_kb(uvicorn_router.proc.pid) - before) / 1024
    assert grew_mb < 30, f"web process grew by {grew_mb:.0f} MB"
    assert httpx.get(uvicorn_router.url + "/livez").status_code == 200


def test_a_huge_single_header_is_cut_off_too(uvicorn_router):
    """One 2 MB header (httptools buffers a header whole before handing it
    over) is refused on raw head bytes."""
    sock = socket.create_connection(("127.0.0.1", uvicorn_router.port), timeout=30)
    try:
        data = b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * (2 * 1024 * 1024)
        sent = 0
        while sent < len(data) and not select.select([sock], [], [], 0.01)[0]:
            try:
                sent += sock.send(data[sent:sent + 65536])
            except (BrokenPipeError, ConnectionResetError):
                break
        answer = sock.recv(65536)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]


def test_uvicorn_with_h11_refuses_an_over_large_head_with_431(backend, monkeypatch):
    """With `--http h11` a head still arriving past h11's cap (sized by
    uvicorn_args) is answered 431 in JSON, not uvicorn's plain-text 400."""
    from tests.support import routerproc

    def h11_args(env=None):
        head = limits_from(env or {}).head_bytes()
        return ["--http", "config.server:H11Protocol", "--h11-max-incomplete-event-size", str(head)]

    monkeypatch.setattr(routerproc, "uvicorn_args", h11_args)
    with RouterProc(config_for(backend)) as router:
        # A head arriving in pieces past h11's cap: refused by h11, answered by us.
        answer = send_big_head(router.port, 2 * 1024 * 1024)
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
        assert b'"request_headers_too_large"' in answer
        # h11 parses a head that arrives whole whatever its size: the ASGI entry refuses it.
        huge = {f"x-h{i}": "a" * 1024 for i in range(40)}
        assert_headers_refused(httpx.get(router.url + "/v1/models", headers=huge))
        many = {f"x-h{i}": "1" for i in range(150)}
        assert_headers_refused(httpx.get(router.url + "/v1/models", headers=many))
        assert httpx.get(router.url + "/v1/models").status_code == 200


def test_the_asgi_entry_refuses_too_many_headers_under_daphne(backend):
    """daphne (Twisted) allows 500 headers: the ASGI entry point enforces the
    count for every server, and the limit is configurable."""
    with RouterProc(config_for(backend), server="daphne", env={"ROUTER_MAX_HEADER_COUNT": "20"}) as router:
        headers = {f"x-h{i}": "1" for i in range(30)}
        assert_headers_refused(httpx.get(router.url + "/v1/models", headers=headers))
        assert httpx.get(router.url + "/v1/models", headers={"x-one": "1"}).status_code == 200


def test_limits_are_read_from_the_environment_and_fail_loudly():
    """Defaults, overrides, and a bad value naming its variable."""
    assert limits_from({}) == Limits(100, 32 * 1024, 256, 1)
    assert limits_from({"ROUTER_MAX_CONCURRENT": "0", "ROUTER_MAX_HEADER_COUNT": "7"}).max_concurrent == 0
    with pytest.raises(ValueError, match="ROUTER_MAX_HEADER_BYTES"):
        limits_from({"ROUTER_MAX_HEADER_BYTES": "lots"})
    lim = limits_from({})
    assert headers_over_limit([(b"a", b"b")] * 101, lim)
    assert not headers_over_limit([(b"a", b"b")] * 100, lim)


# -- admission ----------------------------------------------------------------


def open_slow_request(port: int) -> socket.socket:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"content-length: %d\r\n\r\n%s" % (len(body), body))
    return sock


@pytest.mark.parametrize("server", ["uvicorn", "daphne"])
def test_past_the_admission_limit_a_request_is_shed_at_once_with_503(server):
    """ROUTER_MAX_CONCURRENT=2 and two requests held by a slow backend: the
    third gets 503 + Retry-After at once, probes still answer, and once the
    two are gone a request succeeds."""
    behavior = Behavior(hang=True)
    with openai_backend.server_thread("a", ["m"], behavior=behavior) as slow, \
            RouterProc(config_for(slow), server=server, env={"ROUTER_MAX_CONCURRENT": "2"}) as router:
        held = [open_slow_request(router.port) for _ in range(2)]
        try:
            wait_until(lambda: len(slow.requests) >= 2, 30, what="two requests at the backend")
            t0 = time.monotonic()
            r = httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30)
            elapsed = time.monotonic() - t0
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "1"
            assert r.json()["error"]["code"] == "router_overloaded"
            assert elapsed < 5, f"shedding took {elapsed:.1f}s"
            assert httpx.get(router.url + "/livez", timeout=30).status_code == 200
            assert httpx.get(router.url + "/readyz", timeout=30).status_code == 200
        finally:
            for sock in held:
                sock.close()
        behavior.hang = False

        def served() -> bool:
            return httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30).status_code == 200

        wait_until(served, 30, interval=0.2, what="a request to succeed after the held ones left")

