"""A supervised child's log file (node/childlog.py, node/supervisor.py) on
real child processes: its output goes to the file, not the terminal; the
warnings and errors it logs are said once; the file stays bounded."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from node import supervisor
from node.childlog import ChildLog
from node.supervisor import ChildSpec, StartFailure, Supervisor
from tests.support.routerproc import wait_until

SAYS = r"""
import sys, time
print(" -------------- celery@host v5 (banner)")
print('{"ts":"t","level":"info","logger":"router.observe","msg":"request","obs":{}}')
print('{"ts":"t","level":"warning","logger":"router.runtime","msg":"Redis unavailable"}')
print("ERROR:    Exception in ASGI application")
print("Traceback (most recent call last):")
print('{"ts":"t","level":"error","logger":"node.config_watch","msg":"config file not applied: bad"}')
time.sleep(60)
"""


def _run(tmp: Path, specs: list[ChildSpec], said: list[str], **kwargs) -> Supervisor:
    node = Supervisor(specs, cwd=tmp, say=said.append, **kwargs)
    node.start()
    return node


def _tick_until(node: Supervisor, predicate, timeout: float, what: str) -> None:
    def ticked():
        node.tick()
        return predicate()

    wait_until(ticked, timeout, interval=0.1, what=what)


def test_a_childs_warnings_and_errors_are_said_once_and_the_rest_stays_in_its_file(tmp_path, capfd):
    """Two children log the same error (the tasks process and a web process
    both report a refused config): it is said once."""
    specs = [ChildSpec(name, [sys.executable, "-c", SAYS], start_window_s=0.3, log=tmp_path / f"{name}.log")
             for name in ("web", "tasks")]
    said: list[str] = []
    node = _run(tmp_path, specs, said)
    try:
        _tick_until(node, lambda: len(said) >= 3, 20, "the notable lines said")
        time.sleep(0.6)
        node.tick()
    finally:
        node.stop(grace_s=2)
    assert said == [
        "router: web: warning: Redis unavailable",
        "router: web: error: Exception in ASGI application",
        "router: web: error: config file not applied: bad",
    ]
    terminal = capfd.readouterr()
    assert "banner" not in terminal.out + terminal.err
    log = (tmp_path / "web.log").read_text()
    assert log.startswith("--- web started at ") and "(banner)" in log and "Traceback" in log


def test_a_child_that_exits_while_starting_is_reported_with_the_end_of_its_log(tmp_path):
    """Its output is in its file, so the failure carries it (never a previous run's)."""
    log = tmp_path / "web.log"
    log.write_text("an earlier run's last words\n")
    crash = "import sys; print('line one'); sys.exit('ValueError: bad ROUTER_SOMETHING')"
    node = Supervisor([ChildSpec("web", [sys.executable, "-c", crash], start_window_s=5, log=log)],
                      cwd=tmp_path, say=lambda line: None)
    with pytest.raises(StartFailure) as failure:
        node.start()
    message = str(failure.value)
    assert message.startswith(f"web exited with 1 while starting; the end of its log ({log}):")
    assert "line one" in message and "ValueError: bad ROUTER_SOMETHING" in message
    assert "earlier run" not in message


def test_a_log_past_its_limit_moves_to_dot_1_and_starts_again(tmp_path, monkeypatch):
    """A child writing 200 kB with a 20 kB limit: its file and the one
    previous part stay near the limit (what it writes between two looks, 0.1 s
    here, on top); the newest lines are in the file, or in the previous part
    when a trim came right after them."""
    monkeypatch.setattr(supervisor, "LOG_READ_EVERY_S", 0.05)
    monkeypatch.setattr(supervisor, "LOG_TRIM_EVERY_S", 0.1)
    limit = 20_000
    chatty = ("import time\nfor i in range(2000):\n    print(f'{i:06d} ' + 'x' * 93, flush=True)\n"
              "    time.sleep(0.002)\nprint('last line', flush=True)\ntime.sleep(60)\n")
    log = tmp_path / "web.log"
    previous = log.with_name("web.log.1")
    node = _run(tmp_path, [ChildSpec("web", [sys.executable, "-c", chatty], start_window_s=0.2, log=log)], [],
                log_limit_bytes=limit)

    def newest() -> str:  # the file and the part before it
        return (previous.read_text() if previous.exists() else "") + log.read_text()

    try:
        sizes = []

        def done() -> bool:
            sizes.append(log.stat().st_size)
            return "last line" in newest()

        _tick_until(node, done, 60, "the child's last line")
        time.sleep(0.2)
        node.tick()
    finally:
        node.stop(grace_s=2)
    assert previous.exists()
    assert previous.stat().st_size <= 3 * limit and max(sizes) <= 3 * limit
    assert log.stat().st_size <= limit and "last line" in newest()
    assert "001999 " in newest()  # the line before it too: the newest lines are kept


def test_notable_skips_a_burst_past_its_read_bound(tmp_path, monkeypatch):
    """A child that floods its log: one read takes at most READ_MAX bytes,
    the newest; what came before is skipped, never read."""
    monkeypatch.setattr("node.childlog.READ_MAX", 4096)
    path = tmp_path / "web.log"
    log = ChildLog(path)
    log.start()
    warning = b'{"level":"warning","msg":"%d"}\n'
    path.write_bytes(b"".join(warning % i for i in range(1000)))
    found = log.notable()
    assert 0 < len(found) <= 4096 // len(warning % 999) + 1
    assert found[-1] == ("warning", "999")
    assert log.notable() == []
