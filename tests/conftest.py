"""Shared fixtures: fake backends (real HTTP on loopback) and router processes."""

from __future__ import annotations

import importlib

import pytest

from fakes import ollama_backend, openai_backend
from tests.support.routerproc import RouterProc


@pytest.fixture(autouse=True, scope="session")
def _celery_app():
    """The tasks bind to the project's Celery app, as in the tasks process and
    beat (``celery -A config`` loads `config.celery`); no other process
    imports it (config/__init__.py), so a test that sends a task loads it."""
    importlib.import_module("config.celery")


def _fake_factory(module, default_models):
    """Factory fixture body: start fakes of one kind; all stopped after the test."""
    started = []

    def make(*names: str, models=default_models):
        servers = [module.server_thread(name, list(models)).start() for name in names]
        started.extend(servers)
        return servers

    return make, started


@pytest.fixture(autouse=True)
def _no_touched_names_left():
    """A test that writes mirror rows without bumping the revision (a write
    function called alone, as the tasks process calls it inside a bump) must
    not leave its touched names to the next test of this process: they would
    be logged with that test's bump (router.revision)."""
    yield
    from router.revision import forget_pending

    forget_pending()


@pytest.fixture
def openai_backends():
    """Factory: start N fake OpenAI-compatible backends; stopped after the test."""
    make, started = _fake_factory(openai_backend, ("m",))
    yield make
    for server in started:
        server.stop()


@pytest.fixture
def ollama_servers():
    """Factory: start N fake Ollama servers; stopped after the test."""
    make, started = _fake_factory(ollama_backend, ("llama3.2",))
    yield make
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def running_node():
    """A running router web process, one per module: the node the doctor's
    `node.web` check finds when ROUTER_HOST / ROUTER_PORT point at it."""
    proc = RouterProc("backends: []\n").start()
    yield proc
    proc.stop()


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
