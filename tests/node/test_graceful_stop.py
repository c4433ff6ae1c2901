"""A stop drains (`runnode`, SIGTERM): the node leaves the AppProxy coordinator
first, the web stops accepting, the requests in flight get ROUTER_STOP_GRACE
seconds, and what is left is ended with an error in its door's shape — never
a bare cut — before the processes exit.

Real nodes (`manage.py runnode`) in front of slow fake backends on loopback;
every wait is on a condition with a generous deadline.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
import uuid
from types import SimpleNamespace

import httpx
import orjson
import pytest
from django.core.management.base import CommandError

from node.management.commands.runnode import STOP_MARGIN_S, Command, stop_grace
from tests.appproxy.router_support import router_yaml
from tests.appproxy.support import API_SECRET, JWT_SECRET, coordinator, node_yaml
from tests.support.routerproc import wait_until

CHAT = {"messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}


def backends(*pairs) -> str:
    return "".join(f"  - {{name: {name}, url: '{server.url}', models: [{name}]}}\n" for name, server in pairs)


class Call(threading.Thread):
    """One POST read to its end in a thread: status, raw bytes, how it ended."""

    def __init__(self, url: str, path: str, body: dict) -> None:
        super().__init__(daemon=True)
        self.url, self.path, self.body = url, path, body
        self.status: int | None = None
        self.raw = b""
        self.error: Exception | None = None
        self.ended_at: float | None = None
        self.begun = threading.Event()  # a first body byte arrived (or it ended)

    def run(self) -> None:
        try:
            with httpx.Client(timeout=120) as client, client.stream("POST", self.url + self.path, json=self.body) as r:
                self.status = r.status_code
                for chunk in r.iter_raw():
                    self.raw += chunk
                    self.begun.set()
        except httpx.HTTPError as exc:  # e.g. a chunked body cut short
            self.error = exc
        finally:
            self.ended_at = time.monotonic()
            self.begun.set()

    def finish(self, timeout: float = 90.0) -> Call:
        self.join(timeout)
        assert not self.is_alive(), f"{self.path} still running after {timeout}s"
        return self

    def last_data(self) -> str:
        """The last `data:` payload of an event stream."""
        lines = [line for line in self.raw.decode().splitlines() if line.startswith("data: ")]
        assert lines, self.raw[-500:]
        return lines[-1][len("data: "):]


def test_the_grace_defaults_to_30_s_and_a_bad_value_names_the_variable():
    assert stop_grace({}) == 30
    assert stop_grace({"ROUTER_STOP_GRACE": " 5 "}) == 5
    assert stop_grace({"ROUTER_STOP_GRACE": "0"}) == 0
    for bad in ("-1", "2.5", "soon"):
        with pytest.raises(CommandError, match="ROUTER_STOP_GRACE must be a whole number of seconds"):
            stop_grace({"ROUTER_STOP_GRACE": bad})


@pytest.mark.parametrize("appproxy", [False, True])
def test_uvicorn_gets_the_grace_and_the_tasks_process_goes_first_with_appproxy(appproxy):
    opts = {"host": "127.0.0.1", "port": 8000, "server": "uvicorn", "workers": 1, "no_tasks": False,
            "stop_grace": 7}
    cfg = SimpleNamespace(appproxy={"enabled": appproxy}, appproxy_router=None)
    specs = {spec.name: spec for spec in Command()._specs([], cfg, opts)}
    web = specs["web"].argv
    assert web[web.index("--timeout-graceful-shutdown") + 1] == "7"
    assert STOP_MARGIN_S >= 5  # the supervisor's wait is the web's grace plus this
    assert specs["tasks"].stop_first is appproxy
    assert not any(spec.stop_first for name, spec in specs.items() if name != "tasks")


def refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def stream_backend(openai_backends, name: str, seconds: float):
    (server,) = openai_backends(name, models=(name,))
    server.behavior.chunks = int(seconds / 0.5)
    server.behavior.chunk_delay_s = 0.5
    return server


def test_streams_within_the_grace_finish_and_no_new_connection_is_taken(openai_backends, node_factory):
    """Streams of ~15 s (longer than the supervisor's old 10 s kill) all end
    with [DONE]; meanwhile the port refuses new connections; runnode exits 0."""
    slow = stream_backend(openai_backends, "slow", 15)
    node = node_factory(config="backends:\n" + backends(("slow", slow)), args=("--no-tasks",)).start()
    calls = [Call(node.url, "/v1/chat/completions", {"model": "slow", "stream": True, **CHAT}) for _ in range(4)]
    for call in calls:
        call.start()
    for call in calls:
        assert call.begun.wait(60), "a stream did not begin"
    node.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: refused(node.port), 30, interval=0.05, what="the web to stop accepting")
    assert any(call.is_alive() for call in calls), "the streams ended before the web stopped accepting"
    for call in calls:
        call.finish()
        assert call.error is None and call.status == 200, (call.error, call.raw[-300:])
        assert call.last_data() == "[DONE]", call.raw[-300:]
    assert node.proc.wait(60) == 0


@pytest.mark.parametrize("server", ["uvicorn", "daphne"])
def test_what_outlives_the_grace_ends_with_its_doors_error(openai_backends, node_factory, server):
    """With a 2 s grace (none under daphne) and 30 s streams: an OpenAI stream
    ends with an OpenAI error event, an Anthropic stream with an Anthropic
    `error` event, and a request still waiting for its backend gets a 503 in
    its door's shape; then runnode exits 0."""
    slow = stream_backend(openai_backends, "slow", 30)
    (stuck,) = openai_backends("stuck", models=("stuck",))
    stuck.behavior.hang = True
    node = node_factory(config="backends:\n" + backends(("slow", slow), ("stuck", stuck)),
                        args=("--no-tasks", "--server", server), env={"ROUTER_STOP_GRACE": "2"}).start()
    streams = {
        "openai": Call(node.url, "/v1/chat/completions", {"model": "slow", "stream": True, **CHAT}),
        "anthropic": Call(node.url, "/v1/messages", {"model": "slow", "stream": True, **MESSAGES}),
    }
    waiting = {
        "openai": Call(node.url, "/v1/chat/completions", {"model": "stuck", **CHAT}),
        "anthropic": Call(node.url, "/v1/messages", {"model": "stuck", **MESSAGES}),
    }
    for call in [*streams.values(), *waiting.values()]:
        call.start()
    for call in streams.values():
        assert call.begun.wait(60), "a stream did not begin"
    wait_until(lambda: len(stuck.requests) == 2, 60, what="both waiting requests at the stuck backend")
    half = None
    if server == "uvicorn":  # one whose body is still arriving (daphne calls the app with a whole body only)
        half = socket.create_connection(("127.0.0.1", node.port), timeout=60)
        half.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: 100\r\n\r\n{\"model\": ")
        wait_until(lambda: httpx.get(node.url + "/livez", timeout=30).status_code == 200, 30, what="a probe")
    stopped_at = time.monotonic()
    node.proc.send_signal(signal.SIGTERM)
    for call in [*streams.values(), *waiting.values()]:
        call.finish()
        assert call.error is None, (call.path, call.error, call.raw[-300:])
    if half is not None:  # answered 503 at the grace's end, not left without an answer
        answer = b""
        while chunk := half.recv(65536):
            answer += chunk
        half.close()
        assert answer.startswith(b"HTTP/1.1 503 "), answer[:300]
        assert orjson.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "server_shutting_down"
    assert node.proc.wait(60) == 0

    assert streams["openai"].status == 200
    error = orjson.loads(streams["openai"].last_data())["error"]
    assert error["code"] == "server_shutting_down" and error["type"] == "server_error", error
    assert streams["anthropic"].status == 200
    assert streams["anthropic"].raw.rstrip().rsplit(b"\n\n", 1)[-1].startswith(b"event: error\n"), \
        streams["anthropic"].raw[-300:]
    event = orjson.loads(streams["anthropic"].last_data())
    assert event["type"] == "error" and event["error"]["type"] == "overloaded_error", event

    assert waiting["openai"].status == 503
    assert orjson.loads(waiting["openai"].raw)["error"]["code"] == "server_shutting_down"
    assert waiting["anthropic"].status == 503
    assert orjson.loads(waiting["anthropic"].raw) == {
        "type": "error", "error": {"type": "overloaded_error", "message": "The router is shutting down; retry the request."}}
    if server == "uvicorn":  # the grace was given before anything was cut
        assert all(call.ended_at - stopped_at >= 2.0 for call in [*streams.values(), *waiting.values()])


@pytest.mark.parametrize("mode", ["legacy", "router"])
def test_the_node_leaves_the_coordinator_before_the_web_stops_accepting(openai_backends, node_factory, mode):
    """AppProxy, both modes: the coordinator gets the node's DELETE before the
    web stops accepting connections (the tasks process is stopped first), and
    a stream in flight still ends with [DONE] after it (legacy: plain /v1
    traffic is served by model name; ROUTER mode admits coordinator keys only)."""
    fc = coordinator()
    fc.start()
    try:
        slow = stream_backend(openai_backends, "slow", 15)
        authority = f"router-{uuid.uuid4().hex[:8]}"
        node = node_factory(env={"APPPROXY_API_SECRET": API_SECRET, "APPPROXY_JWT_SECRET": JWT_SECRET})
        yaml = node_yaml if mode == "legacy" else router_yaml
        node.dir.joinpath("router.yaml").write_text(
            yaml(coordinator_url=fc.url, channel=fc.channel, authority=authority, port=node.port,
                 backends=backends(("slow", slow)))
        )
        node.start(timeout=120)
        call = None
        if mode == "legacy":
            call = Call(node.url, "/v1/chat/completions", {"model": "slow", "stream": True, **CHAT})
            call.start()
            assert call.begun.wait(60), "the stream did not begin"

        refused_at: list[float] = []

        def watch() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if refused(node.port):
                    refused_at.append(time.monotonic())
                    return
                time.sleep(0.01)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        node.proc.send_signal(signal.SIGTERM)
        watcher.join(130)
        assert refused_at, "the web never stopped accepting"
        assert node.proc.wait(90) == 0
        gone = [d for d in fc.deregistrations() if d.authority == authority]
        assert gone, "the coordinator saw no deregistration"
        assert gone[0].at < refused_at[0], f"deregistered {gone[0].at - refused_at[0]:.2f}s after the web stopped accepting"
        if call is not None:
            call.finish()
            assert call.error is None and call.last_data() == "[DONE]", call.raw[-300:]
            assert call.ended_at > gone[0].at
    finally:
        fc.stop()
