"""Fixtures of the node tests: a whole node (`manage.py runnode`) on free ports."""

from __future__ import annotations

import pytest

from tests.support.nodeproc import CONFIG, NodeProc, pid_alive

__all__ = ["CONFIG", "NodeProc", "node_factory", "pid_alive"]


@pytest.fixture
def node_factory():
    nodes: list[NodeProc] = []

    def make(**kwargs) -> NodeProc:
        node = NodeProc(**kwargs)
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.stop()
