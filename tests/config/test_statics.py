"""`/static/` (issue 34, defect 9): a path that tries to leave the static
root, or that no file name can be, is a 404 with at most one log line — never
a 500 and its traceback per request (log flooding).

Real router processes (uvicorn and daphne), raw sockets: an HTTP client would
normalise the dot segments this is about before they reach the server.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from tests.support.routerproc import RouterProc

CONFIG = "backends: []\nhealth: {enabled: false}\n"

TRAVERSALS = [
    "/static/../x",
    "/static/../config/settings.py",
    "/static/%2e%2e/x",
    "/static/%2E%2E/%2E%2E/etc/passwd",
    "/static/..%2fsettings.py",
    "/static/..%2F..%2Fconfig%2Fsettings.py",
    "/static/%252e%252e/%252e%252e/manage.py",  # Django decodes the name once more
    "/static/..%252fmanage.py",
    "/static/admin/../../config/settings.py",
    "/static/admin/%2e%2e/%2e%2e/manage.py",
    "/static/./../x",
    "/static//etc/passwd",
    "/static/%2fetc%2fpasswd",
    "/static/..%5c..%5cconfig%5csettings.py",
    "/static/C:%5cwindows%5cwin.ini",
    "/static/%00",
    "/static/admin%00/css/base.css",
    "/static/a%00.css",
    "/static/%2500",
    "/static/%0d%0aX-Injected:%201",
    "/static/%ff%fe",
    "/static/" + "a" * 4000,
    "/static/" + "/".join(["a" * 200] * 15),
    "/static/",
    "/static/admin/css/missing.css",
]


def get(port: int, path: str) -> tuple[int, bytes]:
    """One `GET <path>` exactly as written; the status and the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode("latin-1"))
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1]), answer


@pytest.fixture(scope="module", params=["uvicorn", "daphne"])
def router(request):
    proc = RouterProc(CONFIG, server=request.param, env={"ROUTER_LOG_LEVEL": "INFO"}).start()
    yield proc
    proc.stop()


def test_traversal_and_impossible_names_are_404_without_a_traceback(router):
    """Every shape of `..` (plain, encoded, through a real directory, with a
    backslash), absolute and drive paths, NUL and CR/LF bytes, over-long names:
    404, and the log grows by at most one line per request, none a traceback."""
    ok, _ = get(router.port, "/static/admin/css/base.css")
    assert ok == 200  # the guard lets a real file through
    before = router.logs()
    for path in TRAVERSALS:
        status, answer = get(router.port, path)
        assert status == 404, (path, answer[:300])
        assert b"X-Injected" not in answer.split(b"\r\n\r\n", 1)[0], path
        assert b"Traceback" not in answer and b'File "' not in answer, path
    grown = router.logs()[len(before) :]
    assert "Traceback" not in grown, grown[-3000:]
    assert len(grown.splitlines()) <= len(TRAVERSALS), grown[-3000:]
    assert router.proc is not None and router.proc.poll() is None


# -- in process: the guard's rule, and the net under it ----------------------------


@pytest.mark.parametrize(
    ("name", "no_file"),
    [("admin/css/base.css", False), ("admin/img/icon yes.svg", False), ("a..b/c.d..", False),
     ("", True), ("..", True), ("a/../b", True), ("./a", True), ("a/.", True), ("/etc/passwd", True),
     ("a\\..\\b", True), ("a\x00b", True), ("a\r\nb", True), ("a\x7fb", True), ("a" * 1025, True)],
)  # fmt: skip
def test_refused_names(name, no_file):
    from config.statics import refused

    assert refused(name) is no_file


async def test_what_django_still_refuses_is_one_line_and_a_404(monkeypatch, caplog):
    """A name the guard lets through but Django's finders refuse (here made
    to raise) is a 404 with one warning line and no traceback, not a 500."""
    from django.core.exceptions import SuspiciousFileOperation

    from config.statics import StaticFiles

    def suspicious(self, request):
        raise SuspiciousFileOperation("The joined path is located outside of the base path component.")

    monkeypatch.setattr(StaticFiles, "serve", suspicious)

    async def app(scope, receive, send):  # pragma: no cover - not a static path
        raise AssertionError("handed off")

    sent: list[dict] = []
    body = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive():
        if body:
            return body.pop()
        await asyncio.Event().wait()  # the client stays; Django cancels its listener when done

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/static/admin/x.css", "raw_path": b"/static/admin/x.css",
             "query_string": b"", "headers": [(b"host", b"x")], "client": ("127.0.0.1", 1), "server": ("x", 80),
             "scheme": "http", "http_version": "1.1", "asgi": {"version": "3.0"}}  # fmt: skip
    caplog.set_level("DEBUG")
    await StaticFiles(app)(scope, receive, send)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 404
    records = [r for r in caplog.records if r.levelno >= 30]
    assert len(records) == 1 and records[0].exc_info is None, [r.getMessage() for r in records]
    assert "SuspiciousFileOperation" in records[0].getMessage()
