"""node.supervisor's stop, on plain child processes: the `stop_first`
children go (and are waited for) before the others get SIGTERM, and a child
that ignores SIGTERM holds the stop no longer than its bounds."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from node.supervisor import ChildSpec, Supervisor
from tests.support.routerproc import wait_until

CHILD = """
import pathlib, signal, sys, time
here = pathlib.Path(sys.argv[1])
def term(*_):
    (here / (sys.argv[2] + ".term")).write_text(repr(time.monotonic()))
    if sys.argv[3] == "ignore":
        return
    time.sleep(float(sys.argv[3]))
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
(here / (sys.argv[2] + ".up")).touch()
while True:
    time.sleep(0.05)
"""


def _spec(tmp: Path, name: str, on_term: str, *, first: bool = False) -> ChildSpec:
    return ChildSpec(name, [sys.executable, "-c", CHILD, str(tmp), name, on_term], start_window_s=0.3,
                     stop_first=first)


def _started(tmp: Path, specs: list[ChildSpec]) -> Supervisor:
    node = Supervisor(specs, cwd=tmp, say=lambda line: None)
    node.start()
    wait_until(lambda: all((tmp / f"{s.name}.up").exists() for s in specs), 30, what="children up")
    return node


def _term_at(tmp: Path, name: str) -> float:
    return float((tmp / f"{name}.term").read_text())


def test_the_stop_first_child_is_gone_before_the_others_get_sigterm(tmp_path):
    """The tasks process (stop_first) deregisters as it exits: the web is
    signalled only once it is gone."""
    node = _started(tmp_path, [_spec(tmp_path, "web", "0"), _spec(tmp_path, "tasks", "1.0", first=True)])
    node.stop(grace_s=30, first_s=30)
    # (each child writes the time its handler ran: a busy machine may run the
    # first one's late, so allow a tenth of the wait)
    assert _term_at(tmp_path, "web") - _term_at(tmp_path, "tasks") >= 0.9
    assert all(c.proc is not None and c.proc.poll() is not None for c in node.children)


def test_a_stop_first_child_that_hangs_delays_the_others_by_first_s_only(tmp_path):
    node = _started(tmp_path, [_spec(tmp_path, "web", "0"), _spec(tmp_path, "tasks", "ignore", first=True)])
    began = time.monotonic()
    node.stop(grace_s=1.0, first_s=1.0)
    took = time.monotonic() - began
    assert 0.9 <= _term_at(tmp_path, "web") - _term_at(tmp_path, "tasks")  # (see above)
    assert took < 20, took  # first_s + grace_s, then SIGKILL (generous on a busy machine)
    assert all(c.proc is not None and c.proc.poll() is not None for c in node.children)
