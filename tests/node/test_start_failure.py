"""A node that cannot start says why and exits non-zero within seconds."""

from __future__ import annotations

import socket
import sys
import time

import pytest

from node.supervisor import ChildSpec, StartFailure, Supervisor
from router.services import DEMO_CONFIG
from tests.support.nodeproc import pid_alive


def _hold_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_web_port_in_use_is_a_clear_error_and_a_fast_exit(node_factory):
    with _hold_port() as busy:
        port = busy.getsockname()[1]
        node = node_factory(port=port).spawn()
        started = time.monotonic()
        code = node.proc.wait(20)
    assert code != 0
    assert time.monotonic() - started < 20
    logs = node.logs()
    assert f"port {port} on 127.0.0.1 is already in use" in logs
    assert "router: ready" not in logs  # never claims to serve


def test_a_demo_port_in_use_names_the_other_demo_node(node_factory):
    """A second demo node on one machine fails with a message, not a traceback."""
    try:
        busy = socket.socket()
        # A demo node that just stopped leaves connections in TIME_WAIT on the
        # port: binding is allowed then (only a listener makes it "in use").
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", 18001))
        busy.listen()
    except OSError:
        busy = None  # already held (a demo node runs here): the same case
    try:
        node = node_factory()
        node.env["ROUTER_CONFIG"] = str(DEMO_CONFIG)  # even when a ./router.yaml was made from it
        code = node.spawn().proc.wait(20)
    finally:
        if busy is not None:
            busy.close()
    assert code != 0
    logs = node.logs()
    assert "port 18001 on 127.0.0.1 is already in use; is another demo node running?" in logs
    assert "Traceback" not in logs


def test_a_child_exiting_in_its_start_window_fails_the_start_and_stops_the_rest(tmp_path):
    slow = ChildSpec("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], start_window_s=5)
    dying = ChildSpec("dying", [sys.executable, "-c", "import time; time.sleep(0.3); raise SystemExit(3)"],
                      start_window_s=5)
    node = Supervisor([slow, dying], cwd=tmp_path, say=lambda line: None)
    started = time.monotonic()
    with pytest.raises(StartFailure, match="dying exited with 3 while starting"):
        node.start()
    assert time.monotonic() - started < 15
    sleeper = node.children[0].proc
    assert sleeper is not None and not pid_alive(sleeper.pid)


def test_a_web_child_that_never_listens_fails_the_start(tmp_path):
    port_holder = socket.socket()
    port_holder.bind(("127.0.0.1", 0))
    port = port_holder.getsockname()[1]
    port_holder.close()
    mute = ChildSpec("web", [sys.executable, "-c", "import time; time.sleep(60)"], listen=("127.0.0.1", port),
                     start_window_s=1.5)
    node = Supervisor([mute], cwd=tmp_path, say=lambda line: None)
    with pytest.raises(StartFailure, match=f"does not accept connections on 127.0.0.1:{port}"):
        node.start()
