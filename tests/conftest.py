"""Shared fixtures: fake backends (real HTTP on loopback) and router processes."""

from __future__ import annotations

import pytest

from router.demo import ollama_backend, openai_backend
from tests.support.routerproc import RouterProc


@pytest.fixture
def openai_backends(request):
    """Factory: start N fake OpenAI-compatible backends; stopped after the test."""
    started = []

    def make(*names: str, models=("m",)):
        servers = []
        for name in names:
            server = openai_backend.server_thread(name, list(models)).start()
            started.append(server)
            servers.append(server)
        return servers

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def ollama_servers():
    started = []

    def make(*names: str, models=("llama3.2",)):
        servers = []
        for name in names:
            server = ollama_backend.server_thread(name, list(models)).start()
            started.append(server)
            servers.append(server)
        return servers

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def router_factory():
    """Factory: start a router process on a YAML config; stopped after the test."""
    procs: list[RouterProc] = []

    def make(config: str, **kwargs) -> RouterProc:
        proc = RouterProc(config, **kwargs).start()
        procs.append(proc)
        return proc

    yield make
    for proc in procs:
        proc.stop()
