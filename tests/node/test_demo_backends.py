"""`make run` starts the demo backends a config points at, whatever the file:
a copy of the demo config (the natural way to try blocking keys) keeps them."""

from __future__ import annotations

import httpx

from router.config_schema import load
from router.management.commands.runnode import DEMO_BACKENDS, demo_backends
from router.services import DEMO_CONFIG
from router.supervisor import port_in_use
from tests.support.nodeproc import CONFIG
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


def test_a_node_on_a_copied_demo_config_answers_from_the_demo_backends(node_factory):
    node = node_factory(config=DEMO_CONFIG.read_text()).start()
    try:
        _answers(node)
    finally:
        node.stop()
        # The demo ports are fixed: the next test that needs them waits for them.
        wait_until(
            lambda: not any(port_in_use("127.0.0.1", int(a[2])) for a in DEMO_BACKENDS),
            30,
            what="the demo backends to stop",
        )


def _answers(node) -> None:
    r = httpx.post(
        node.url + "/v1/chat/completions",
        timeout=30,
        json={"model": "demo-chat", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]
