"""A node listens on a Unix socket (issue 41, item 3): beside TCP or instead
of it (ROUTER_LISTEN, or the YAML's server.listen), with the configured file
mode; a stale socket file is removed at start and the socket at stop; the
official openai SDK talks to it through an httpx transport; IP rules do not
apply to its clients. Real nodes (`manage.py runnode`), uvicorn and daphne."""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import httpx
import openai
import pytest

from fakes import openai_backend
from router import listen
from tests.support.nodeproc import NodeProc
from tests.support.routerproc import PY, ROOT, wait_until

CONFIG = """
backends:
  - {{name: a, url: '{url}', models: [m]}}
health: {{enabled: false}}
api_keys: {{mode: blocking}}
{extra}
"""
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def backend():
    server = openai_backend.server_thread("a", ["m"]).start()
    yield server
    server.stop()


@pytest.fixture
def sock_path():
    # Short: a socket path is at most 107 bytes, pytest's tmp_path can be longer.
    folder = Path(tempfile.mkdtemp(prefix="rs-", dir="/tmp"))
    yield folder / "router.sock"
    for leftover in folder.iterdir():
        leftover.unlink()
    folder.rmdir()


def stale_socket(path: Path) -> None:
    """A socket file nobody accepts on, as a killed server leaves it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()
    assert stat.S_ISSOCK(path.stat().st_mode) and not listen.accepts(str(path))


def over_socket(path: Path) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), base_url="http://router", timeout=30)


def sdk(path: Path, key: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url="http://router/v1",
        api_key=key,
        max_retries=0,
        http_client=httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), timeout=30),
    )


def create_key(node: NodeProc, *args: str) -> str:
    out = subprocess.run(
        [PY, "manage.py", "createapikey", "--name", "sock", *args],
        cwd=ROOT,
        env=node.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def start_unix_only(node: NodeProc, path: Path) -> NodeProc:
    node.spawn()

    def ready() -> bool:
        assert node.proc is not None
        if node.proc.poll() is not None:
            raise RuntimeError(f"node exited {node.proc.returncode}: {node.logs()[-3000:]}")
        with over_socket(path) as client:
            return "Ctrl-C stops everything" in node.logs() and client.get("/readyz").status_code == 200

    wait_until(ready, 90, interval=0.2, what=f"node on unix:{path} (log {node.log_path})")
    return node


def test_the_sdk_over_a_unix_socket_beside_tcp(backend, sock_path, node_factory):
    """ROUTER_LISTEN=tcp,unix:…: a stale file is replaced by the node's
    socket with ROUTER_UNIX_SOCKET_MODE; the openai SDK chats and streams
    through it; a key limited to another IP is refused over TCP but not over
    the socket; the socket file is gone once the node stopped."""
    stale_socket(sock_path)
    node = node_factory(
        config=CONFIG.format(url=backend.url, extra=""),
        args=("--no-tasks",),
        env={"ROUTER_LISTEN": f"tcp,unix:{sock_path}", "ROUTER_UNIX_SOCKET_MODE": "0600"},
    ).start()
    st = sock_path.stat()
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert re.search(rf"Unix socket\s+{re.escape(str(sock_path))}", node.logs())  # in the ready block

    key = create_key(node, "--ips", "10.9.9.9")
    client = sdk(sock_path, key)
    wait_until(lambda: client.models.list().data[0].id == "m", 15, what="the new key over the socket")
    answer = client.chat.completions.create(model="m", messages=MESSAGES)
    assert answer.choices[0].message.content.startswith("Hello from a.")
    chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks).startswith("Hello from a.")

    over_tcp = httpx.post(
        node.url + "/v1/chat/completions",
        json={"model": "m", "messages": MESSAGES},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert over_tcp.status_code == 403 and over_tcp.json()["error"]["code"] == "ip_not_allowed"

    node.stop()
    assert not os.path.exists(sock_path)


@pytest.mark.parametrize("server", ["uvicorn", "daphne"])
def test_the_socket_alone_from_the_yaml(backend, sock_path, node_factory, server):
    """server.listen: [unix:…] and server.unix_socket_mode: no TCP port at
    all, the socket serves /v1 with its mode, and is removed at stop."""
    extra = f"server: {{listen: ['unix:{sock_path}'], unix_socket_mode: '0660'}}"
    node = node_factory(config=CONFIG.format(url=backend.url, extra=extra), args=("--no-tasks", "--server", server))
    start_unix_only(node, sock_path)
    assert stat.S_IMODE(sock_path.stat().st_mode) == 0o660
    with pytest.raises(httpx.ConnectError):
        httpx.get(node.url + "/readyz", timeout=2)
    key = create_key(node)
    wait_until(lambda: sdk(sock_path, key).models.list().data[0].id == "m", 15, what="the key over the socket")
    answer = sdk(sock_path, key).chat.completions.create(model="m", messages=MESSAGES)
    assert answer.choices[0].message.content.startswith("Hello from a.")
    node.stop()
    assert not os.path.exists(sock_path)


def test_a_socket_another_server_accepts_on_fails_the_start(backend, sock_path, node_factory):
    """Never taken over: the start fails naming the path, and leaves it."""
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(str(sock_path))
    live.listen(1)
    try:
        node = node_factory(
            config=CONFIG.format(url=backend.url, extra=""),
            args=("--no-tasks",),
            env={"ROUTER_LISTEN": f"unix:{sock_path}"},
        ).spawn()
        assert node.proc is not None
        assert node.proc.wait(60) != 0
        assert "another server accepts connections" in node.logs() and str(sock_path) in node.logs()
        assert listen.accepts(str(sock_path))
    finally:
        live.close()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"ROUTER_LISTEN": "unix:relative.sock"},
            "ROUTER_LISTEN: 'unix:relative.sock': the socket path must be absolute",
        ),
        ({"ROUTER_LISTEN": "tcp", "ROUTER_UNIX_SOCKET_MODE": "rw"}, "ROUTER_UNIX_SOCKET_MODE: 'rw' is not an octal"),
    ],
)
def test_a_bad_listen_setting_fails_the_start_naming_it(backend, node_factory, env, message):
    node = node_factory(config=CONFIG.format(url=backend.url, extra=""), args=("--no-tasks",), env=env).spawn()
    assert node.proc is not None and node.proc.wait(60) != 0
    assert message in node.logs()
