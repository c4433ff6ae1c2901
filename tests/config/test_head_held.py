"""config.server.HeadHeld: a response head and the body sent right after it
leave in one write; a head with nothing after it still leaves on the next
loop pass; nothing is lost, reordered or written to a closed connection.

The unit tests drive HeadHeld against a recording asyncio.Transport (the
interface uvicorn's cycle writes to); the end-to-end ones run the real router
under uvicorn with config.server's protocol class and read its raw bytes."""

from __future__ import annotations

import asyncio
import socket
import time

import orjson
import pytest

from config.server import HeadHeld
from fakes import openai_backend
from fakes.server import Behavior
from tests.support.routerproc import RouterProc


class Recording(asyncio.Transport):
    """An asyncio transport that records what is written to it, call by call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, bytes]] = []
        self.closed = False

    def write(self, data) -> None:
        self.calls.append(("write", bytes(data)))

    def writelines(self, list_of_data) -> None:
        self.calls.append(("writelines", b"".join(list_of_data)))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True
        self.calls.append(("close", b""))

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default


def run(coro):
    return asyncio.run(coro)


def test_a_head_and_the_body_after_it_leave_in_one_call():
    async def go():
        t = Recording()
        held = HeadHeld(t, asyncio.get_running_loop())
        held.write(b"HTTP/1.1 200 OK\r\n\r\n")
        assert t.calls == []
        held.write(b"{}")
        assert t.calls == [("writelines", b"HTTP/1.1 200 OK\r\n\r\n{}")]
        held.write(b"more")
        await asyncio.sleep(0)
        return t.calls

    assert run(go()) == [("writelines", b"HTTP/1.1 200 OK\r\n\r\n{}"), ("write", b"more")]


def test_a_head_alone_leaves_on_the_next_loop_pass():
    async def go():
        t = Recording()
        held = HeadHeld(t, asyncio.get_running_loop())
        held.write(b"HTTP/1.1 200 OK\r\n\r\n")
        await asyncio.sleep(0)
        first = list(t.calls)
        held.write(b"data: 1\n\n")
        return first, t.calls

    first, calls = run(go())
    assert first == [("write", b"HTTP/1.1 200 OK\r\n\r\n")]
    assert calls[-1] == ("write", b"data: 1\n\n")


def test_close_writes_a_held_head_first_and_a_closed_transport_gets_nothing():
    async def go():
        t = Recording()
        held = HeadHeld(t, asyncio.get_running_loop())
        held.write(b"HEAD")
        held.close()
        await asyncio.sleep(0)
        a = list(t.calls)
        t2 = Recording()
        held2 = HeadHeld(t2, asyncio.get_running_loop())
        held2.write(b"HEAD")
        t2.close()  # the connection went away before the next pass
        await asyncio.sleep(0)
        return a, t2.calls

    a, b = run(go())
    assert a == [("write", b"HEAD"), ("close", b"")]
    assert b == [("close", b"")]


def test_everything_else_is_the_transport_s():
    async def go():
        t = Recording()
        held = HeadHeld(t, asyncio.get_running_loop())
        return held.get_extra_info("peername"), held.is_closing()

    assert run(go()) == (("127.0.0.1", 1), False)


@pytest.fixture(scope="module")
def router():
    backend = openai_backend.server_thread("a", ["m"], behavior=Behavior()).start()
    proc = RouterProc(f"backends:\n  - {{name: a, url: '{backend.url}', models: [m]}}\nhealth: {{enabled: false}}\n")
    proc.start()
    yield proc
    proc.stop()
    backend.stop()


def read_answer(sock: socket.socket, count: int = 1) -> bytes:
    """Read until `count` whole answers (with a Content-Length) are in."""
    data = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
        got, rest = 0, data
        while b"\r\n\r\n" in rest:
            head, _, rest = rest.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                None,
            )
            if length is None or len(rest) < length:
                break
            rest = rest[length:]
            got += 1
        if got >= count:
            break
    return data


def test_expect_100_continue_is_answered_before_the_body_is_sent(router):
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    with socket.create_connection(("127.0.0.1", router.port), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
        )
        interim = sock.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n"), interim
        sock.sendall(body)
        answer = interim.partition(b"\r\n\r\n")[2] + read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:200]
    assert b'"chat.completion"' in answer


def test_pipelined_requests_are_answered_whole_and_in_order(router):
    one = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    two = orjson.dumps({"model": "nope", "messages": [{"role": "user", "content": "x"}]})
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s"
    )
    with socket.create_connection(("127.0.0.1", router.port), timeout=30) as sock:
        sock.sendall(request % (len(one), one) + request % (len(two), two))
        data = read_answer(sock, 2)
    first, _, rest = data.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200 OK"), data[:300]
    assert b"HTTP/1.1 404 Not Found\r\n" in rest and b"model_not_found" in rest.split(b"HTTP/1.1 404", 1)[1]
