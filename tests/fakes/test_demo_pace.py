"""The fakes' command lines are the demo backends: by default they stream a
sentence or two a word at a time at a human pace (DEMO_TOKEN_DELAY_MS), while
the in-process fakes of the test suite keep their instant five pieces."""

from __future__ import annotations

import os
import subprocess
import time

import httpx
import pytest

from fakes.server import DEMO_CHUNKS, Behavior, demo_pace_s
from tests.support.routerproc import PY, ROOT, free_port, wait_until

BODY = {"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def test_the_pace_is_40_ms_unless_demo_token_delay_ms_says_otherwise():
    assert demo_pace_s({}) == 0.04
    assert demo_pace_s({"DEMO_TOKEN_DELAY_MS": " "}) == 0.04
    assert demo_pace_s({"DEMO_TOKEN_DELAY_MS": "0"}) == 0
    assert demo_pace_s({"DEMO_TOKEN_DELAY_MS": "150"}) == 0.15


@pytest.mark.parametrize("raw", ["-1", "fast", "inf", "nan"])
def test_a_bad_pace_is_refused_naming_the_variable(raw):
    with pytest.raises(ValueError, match=f"DEMO_TOKEN_DELAY_MS must be .*{raw!r}"):
        demo_pace_s({"DEMO_TOKEN_DELAY_MS": raw})


def test_the_in_process_fakes_stay_instant():
    """What the test suite's fakes (`ServerThread`) answer with unless a test asks otherwise."""
    assert Behavior().chunk_delay_s == 0 and Behavior().chunks == 5


def _stream_arrivals(env: dict[str, str]) -> list[float]:
    """Starts `python -m fakes.ollama_backend` with `env`, streams one chat,
    returns when each content line arrived."""
    port = free_port()
    proc = subprocess.Popen([PY, "-m", "fakes.ollama_backend", "--port", str(port), "--quiet"],
                            cwd=ROOT, env={**os.environ, **env})
    try:
        wait_until(lambda: _answers(f"http://127.0.0.1:{port}/api/version"), 30, what="the fake Ollama")
        arrivals = []
        with httpx.stream("POST", f"http://127.0.0.1:{port}/api/chat", json=BODY, timeout=30) as r:
            for line in r.iter_lines():
                if line and '"done":false' in line.replace(" ", ""):
                    arrivals.append(time.monotonic())
        return arrivals
    finally:
        proc.terminate()
        proc.wait(10)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_the_demo_backend_streams_its_reply_a_word_at_a_time():
    arrivals = _stream_arrivals({"DEMO_TOKEN_DELAY_MS": "50"})
    assert len(arrivals) == DEMO_CHUNKS
    assert arrivals[-1] - arrivals[0] >= (DEMO_CHUNKS - 1) * 0.05 * 0.9


def test_demo_token_delay_ms_0_sends_the_stream_at_once():
    arrivals = _stream_arrivals({"DEMO_TOKEN_DELAY_MS": "0"})
    assert len(arrivals) == DEMO_CHUNKS
    assert arrivals[-1] - arrivals[0] < 0.5
