"""`make run` starts the demo backends a config points at, whatever the file:
a copy of the demo config (the natural way to try blocking keys) keeps them;
they stream at a human pace, so the README's streaming example shows it."""

from __future__ import annotations

import time

import httpx
import pytest
from openai import OpenAI

from node import demo as node_demo
from node.demo import DEMO_BACKENDS
from node.management.commands.runnode import demo_backends
from node.supervisor import port_in_use
from router.config_schema import load
from router.services import DEMO_CONFIG
from tests.support.nodeproc import CONFIG, NodeProc
from tests.support.routerproc import wait_until


def _names(argvs: list[list[str]]) -> list[str]:
    return [argv[4] for argv in argvs]


def test_the_demo_config_and_a_copy_of_it_start_every_demo_backend(tmp_path):
    copy = tmp_path / "router.yaml"
    copy.write_text(DEMO_CONFIG.read_text().replace("mode: open", "mode: blocking"))
    every = _names(DEMO_BACKENDS)
    assert _names(demo_backends(load(DEMO_CONFIG)[0])) == every
    assert _names(demo_backends(load(copy)[0])) == every


def test_only_the_demo_backends_named_by_url_start(tmp_path):
    own = tmp_path / "own.yaml"
    own.write_text(
        "backends:\n"
        "  - {name: mine, url: 'http://localhost:18434', kind: ollama, models: [x]}\n"
        "  - {name: far, url: 'http://10.0.0.5:18001', models: [y]}\n"
        "  - {name: tls, url: 'https://127.0.0.1:18002', models: [z]}\n"
    )
    assert _names(demo_backends(load(own)[0])) == ["demo-ollama"]
    plain = tmp_path / "plain.yaml"
    plain.write_text(CONFIG)
    assert demo_backends(load(plain)[0]) == []


@pytest.fixture(scope="module")
def demo_node():
    """One node on (a copy of) the demo config for the module: its demo
    backends' ports are fixed, so two of them cannot run at once."""
    node = NodeProc(config=DEMO_CONFIG.read_text()).start()
    try:
        yield node
    finally:
        node.stop()
        # The next test that needs the demo ports waits for them.
        wait_until(
            lambda: not any(port_in_use("127.0.0.1", int(a[2])) for a in DEMO_BACKENDS),
            30,
            what="the demo backends to stop",
        )


def test_only_plain_http_on_loopback_at_a_demo_port_is_started_by_the_node(tmp_path):
    """The rule runnode and `doctor` share (node.demo): a backend is the
    node's to start only at http://127.0.0.1 or localhost on a demo port."""
    own = tmp_path / "own.yaml"
    own.write_text(
        "backends:\n"
        "  - {name: mine, url: 'http://localhost:18434', kind: ollama, models: [x]}\n"
        "  - {name: far, url: 'http://10.0.0.5:18001', models: [y]}\n"
        "  - {name: tls, url: 'https://127.0.0.1:18002', models: [z]}\n"
        "  - {name: odd, url: 'http://127.0.0.1:18003', models: [w]}\n"
    )
    cfg = load(own)[0]
    assert [b.name for b in cfg.backends if node_demo.started_by_node(b.url)] == ["mine"]
    assert _names(demo_backends(cfg)) == ["demo-ollama"]


def test_a_node_on_a_copied_demo_config_answers_from_the_demo_backends(demo_node):
    _answers(demo_node)


def test_the_readme_streaming_example_receives_its_chunks_over_time(demo_node):
    """The README's example (the OpenAI SDK, `demo-ollama`, stream=True) on
    the demo backends as `make run` starts them: the content arrives token by
    token, not in one burst."""
    client = OpenAI(base_url=demo_node.url + "/v1", api_key="unused-in-open-mode", timeout=30)
    arrivals: list[float] = []
    text = ""
    for chunk in client.chat.completions.create(
        model="demo-ollama", stream=True, messages=[{"role": "user", "content": "hi"}]
    ):
        content = chunk.choices[0].delta.content if chunk.choices else None
        if content:
            arrivals.append(time.monotonic())
            text += content
    assert text.startswith("Hello from demo-ollama.")
    assert len(arrivals) >= 10, arrivals
    assert arrivals[-1] - arrivals[0] >= 0.4, arrivals
    assert len({round(t, 3) for t in arrivals}) > len(arrivals) // 2, arrivals


def _answers(node) -> None:
    r = httpx.post(
        node.url + "/v1/chat/completions",
        timeout=30,
        json={"model": "demo-chat", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]
