"""The web process's GIL switch interval (config.server.share_the_interpreter)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from config import server


@pytest.fixture
def interval():
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_the_web_process_switches_threads_every_millisecond(interval, monkeypatch):
    monkeypatch.delenv("ROUTER_SWITCH_INTERVAL_MS", raising=False)
    sys.setswitchinterval(0.005)
    server.share_the_interpreter()
    assert sys.getswitchinterval() == pytest.approx(0.001)
    monkeypatch.setenv("ROUTER_SWITCH_INTERVAL_MS", "2.5")
    server.share_the_interpreter()
    assert sys.getswitchinterval() == pytest.approx(0.0025)
    monkeypatch.setenv("ROUTER_SWITCH_INTERVAL_MS", "0")  # CPython's own
    sys.setswitchinterval(0.005)
    server.share_the_interpreter()
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_importing_the_asgi_application_applies_it():
    code = "import sys, config.asgi; print(sys.getswitchinterval())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert float(out.stdout.strip().splitlines()[-1]) == pytest.approx(0.001)
