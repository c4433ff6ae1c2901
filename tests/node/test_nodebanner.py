"""The block `runnode` prints once its node has started (node/nodebanner.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.nodebanner import ready_block, started_names
from node.supervisor import ChildSpec


def _block(host: str) -> str:
    return ready_block(host=host, port=8100, started="web, tasks", admin="admin  (its password is in /v/admin-password)",
                       config=Path("/r/router.yaml"), logs="/v/log/  (web.log)", namespace="router:ab:")


@pytest.mark.parametrize(("host", "base", "every"), [("127.0.0.1", "http://127.0.0.1:8100", False),
                                                     ("0.0.0.0", "http://127.0.0.1:8100", True),
                                                     ("::", "http://[::1]:8100", True),
                                                     ("::1", "http://[::1]:8100", False),
                                                     ("10.0.0.5", "http://10.0.0.5:8100", False)])
def test_the_addresses_are_ones_a_browser_here_can_open(host, base, every):
    """A node on every interface is shown at loopback, and the block says it listens on all."""
    block = _block(host)
    for path in ("/v1", "/dashboard/", "/admin/", "/metrics", "/livez", "/readyz", "/status"):
        assert f"  {base}{path}" in block
    assert ("(every interface)" in block) is every


def test_the_block_starts_with_ready_and_ends_with_how_to_stop():
    lines = _block("127.0.0.1").strip().splitlines()
    assert lines[0] == "router: ready: web, tasks started"
    assert lines[-1] == "router: Ctrl-C stops everything"


def test_started_names_counts_the_demo_backends_and_the_web_workers():
    specs = [ChildSpec(name, []) for name in ("demo demo-openai-a", "demo demo-ollama", "web", "tasks", "beat")]
    assert started_names(specs, 1) == "web, tasks, beat, 2 demo backends"
    assert started_names(specs[2:], 4) == "web (4 workers), tasks, beat"
