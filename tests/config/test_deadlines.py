"""What a slow, half-sent or non-reading client may hold (config/deadlines.py,
config/server.py's protocols, config/asgi.py's order): no admission slot while
it sends its body, no backend slot once it stops reading, no connection while
its head dribbles in; and no body at all without a valid key where keys block.

Real router processes, real sockets, a real fake backend.
"""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from fakes import openai_backend
from fakes.server import Behavior
from tests.support import routerproc
from tests.support.routerproc import RouterProc, wait_until

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def config_for(backend, extra: str = "") -> str:
    return (f"backends:\n  - {{name: a, url: '{backend.url}', models: [m], capacity: 2}}\n"
            f"health: {{enabled: false}}\n{extra}")


@pytest.fixture(scope="module")
def backend():
    server = openai_backend.server_thread("a", ["m"], behavior=Behavior()).start()
    yield server
    server.stop()


def half_sent(port: int, *, headers: bytes = b"") -> socket.socket:
    """A POST whose head and first half of its body are sent, and no more."""
    body = json.dumps(CHAT).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"%scontent-length: %d\r\n\r\n%s" % (headers, len(body), body[: len(body) // 2]))
    return sock


def read_answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (or 30 s pass)."""
    sock.settimeout(30)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def test_half_sent_bodies_take_no_admission_slot(backend):
    """Ten clients that send half a body and stop, against ROUTER_MAX_CONCURRENT=4:
    a client that sends its whole request is still served (it used to get
    503 router_overloaded until the idle ones left)."""
    with RouterProc(config_for(backend), env={"ROUTER_MAX_CONCURRENT": "4"}) as router:
        idle = [half_sent(router.port) for _ in range(10)]
        try:
            wait_until(lambda: all(s.fileno() >= 0 for s in idle), 5, what="the idle senders connected")
            for _ in range(3):
                r = httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30)
                assert r.status_code == 200, r.text
        finally:
            for sock in idle:
                sock.close()


def test_bodies_still_arriving_share_one_memory_bound(backend):
    """Slow clients each sending a large body (no admission slot while they
    do) may hold ROUTER_MAX_PENDING_BODY_BYTES between them: the next large
    body is refused 503 with Retry-After at once, a small request is still
    served, and the bytes are released when the senders go."""
    with RouterProc(config_for(backend), env={"ROUTER_MAX_PENDING_BODY_BYTES": "1000000",
                                              "ROUTER_BODY_TIMEOUT": "60"}) as router:
        senders: list[socket.socket] = []
        refused = b""
        try:
            for _ in range(4):
                sock = socket.create_connection(("127.0.0.1", router.port), timeout=30)
                senders.append(sock)
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                             b"content-length: 700000\r\n\r\n" + b"x" * 400_000)
                sock.settimeout(3)
                try:
                    refused = sock.recv(65536)
                except TimeoutError:
                    continue  # being read: it holds its 400 kB
                break
            assert refused.startswith(b"HTTP/1.1 503 "), refused[:200]
            assert len(senders) >= 2  # the first one always fits
            head, _, body = refused.partition(b"\r\n\r\n")
            assert b"retry-after: 1" in head.lower()
            assert json.loads(body)["error"]["code"] == "request_bodies_pending"
            assert httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30).status_code == 200
        finally:
            for sock in senders:
                sock.close()

        def large_body_fits() -> bool:
            r = httpx.post(router.url + "/v1/chat/completions", timeout=30,
                           json={**CHAT, "messages": [{"role": "user", "content": "x" * 600_000}]})
            return r.status_code == 200

        wait_until(large_body_fits, 20, interval=0.2, what="the senders' bytes released")


def test_a_body_that_stops_arriving_is_answered_408_and_closed(backend):
    with RouterProc(config_for(backend), env={"ROUTER_BODY_TIMEOUT": "1"}) as router:
        sock = half_sent(router.port)
        started = time.monotonic()
        answer = read_answer(sock)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        head, _, body = answer.partition(b"\r\n\r\n")
        assert b"connection: close" in head.lower()
        assert json.loads(body)["error"]["code"] == "request_timeout"
        assert time.monotonic() - started < 25
        # The process is fine, and counted nothing it still holds.
        assert httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30).status_code == 200


def test_without_a_valid_key_no_body_is_awaited_where_keys_block(backend):
    """Blocking mode: a request head with no key, or an unknown one, is a 401
    at once, whatever body it announces (it used to wait for the body)."""
    with RouterProc(config_for(backend, "api_keys: {mode: blocking}\n")) as router:
        for extra in (b"", b"authorization: Bearer sk-nobody\r\n"):
            sock = half_sent(router.port, headers=extra)
            sock.settimeout(10)
            answer = sock.recv(65536)  # arrives while the body is still half sent
            sock.close()
            assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
            code = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"]
            assert code == ("missing_api_key" if not extra else "invalid_api_key")
        # The Anthropic door refuses in its own shape.
        r = httpx.post(router.url + "/v1/messages", json={"model": "m", "max_tokens": 5, "messages": []},
                       timeout=30)
        assert r.status_code == 401
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "authentication_error"


def stalled_stream(port: int, path: str, body: dict) -> socket.socket:
    """A streaming request whose client never reads a byte of the answer."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    raw = json.dumps(body).encode()
    sock.sendall(b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                 % (path.encode(), len(raw), raw))
    return sock


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_a_client_that_stops_reading_loses_its_stream_and_frees_the_backend(path):
    """A backend with `capacity: 2` and two clients that never read a long
    stream: past ROUTER_SEND_TIMEOUT their connections are cut and the
    backend serves others (it used to answer everyone else 429 for as long
    as the two stayed connected)."""
    behavior = Behavior(chunks=200_000)
    body = ({**CHAT, "stream": True} if path == "/v1/chat/completions"
            else {"model": "m", "max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    with openai_backend.server_thread("a", ["m"], behavior=behavior) as slow, \
            RouterProc(config_for(slow), env={"ROUTER_SEND_TIMEOUT": "2"}) as router:
        stalled = [stalled_stream(router.port, path, body) for _ in range(2)]
        try:
            wait_until(lambda: len(slow.requests) >= 2, 30, what="two streams at the backend")
            behavior.chunks = 2  # what the others ask for is short

            def served() -> bool:
                r = httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30)
                return r.status_code == 200

            wait_until(served, 60, interval=0.5, what="the backend's slots freed from the stalled clients")
            # The stalled clients' connections were closed by the router.
            for sock in stalled:
                assert read_answer(sock)  # what was buffered, then the close (no 30-s wait)
        finally:
            for sock in stalled:
                sock.close()


@pytest.mark.parametrize("protocol", ["HttpToolsProtocol", "H11Protocol"])
def test_a_head_that_never_completes_is_answered_408_and_closed(backend, protocol, monkeypatch):
    if protocol == "H11Protocol":
        monkeypatch.setattr(routerproc, "uvicorn_args", lambda env=None: ["--http", "config.server:H11Protocol"])
    with RouterProc(config_for(backend), env={"ROUTER_HEADER_TIMEOUT": "1"}) as router:
        silent = socket.create_connection(("127.0.0.1", router.port), timeout=30)
        partial = socket.create_connection(("127.0.0.1", router.port), timeout=30)
        partial.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        for sock in (silent, partial):
            answer = read_answer(sock)
            sock.close()
            assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
            assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_timeout"
        # A kept-alive connection may idle between requests (uvicorn's own keep-alive
        # timeout governs that), and a whole head in time is served.
        with httpx.Client(base_url=router.url, timeout=30) as client:
            assert client.post("/v1/chat/completions", json=CHAT).status_code == 200
            assert client.post("/v1/chat/completions", json=CHAT).status_code == 200


@pytest.mark.parametrize("hosts, code", [(b"", "missing_host"), (b"host: a\r\nhost: b\r\n", "duplicate_host")])
def test_a_1_1_request_needs_exactly_one_host(backend, hosts, code):
    with RouterProc(config_for(backend)) as router:
        sock = socket.create_connection(("127.0.0.1", router.port), timeout=30)
        sock.sendall(b"GET /v1/models HTTP/1.1\r\n%s\r\n" % hosts)
        answer = read_answer(sock)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == code
        # HTTP/1.0 needs none.
        sock = socket.create_connection(("127.0.0.1", router.port), timeout=30)
        sock.sendall(b"GET /livez HTTP/1.0\r\n\r\n")
        assert read_answer(sock).startswith(b"HTTP/1.1 200 ")
        sock.close()
