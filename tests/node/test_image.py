"""The image build context never carries a node's secrets or state."""

from __future__ import annotations

from tests.support.routerproc import ROOT


def test_dockerignore_excludes_config_state_and_logs():
    entries = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {"router.yaml", "var", "*.log", "logs/", ".env"} <= entries
