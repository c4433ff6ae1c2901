"""Warm-up is not down (router.core.health): pure, clocks passed in."""

from __future__ import annotations

import pytest

from router.cluster import PROBE_FAILING, WARMING_UP, verdict
from router.core.health import BackendState, HealthPolicy, Probe

POLICY = HealthPolicy(
    unhealthy_threshold=2, healthy_threshold=1, interval_s=10, warmup_interval_s=1, warmup_timeout_s=60
)


def state() -> BackendState:
    return BackendState(policy=POLICY)


@pytest.mark.parametrize("first", [Probe.LOADING, Probe.UNAVAILABLE, Probe.UNREACHABLE])
def test_a_backend_first_seen_starting_warms_up_and_is_never_counted(first):
    s = state()
    for t in range(0, 59):
        s.on_probe(first, float(t))
        assert s.warming and not s.probe_healthy and s.probe_fail_streak == 0
        assert verdict(s, float(t))[0] == WARMING_UP
        assert s.probe_interval() == 1
    s.on_probe(Probe.OK, 59.0)
    assert s.probe_healthy and not s.warming and s.probe_interval() == 10


def test_a_backend_that_never_comes_up_is_down_when_the_window_ends():
    s = state()
    s.on_probe(Probe.UNREACHABLE, 0.0)
    s.on_probe(Probe.LOADING, 30.0)
    s.on_probe(Probe.LOADING, 60.0)
    assert not s.warming and not s.probe_healthy and verdict(s, 60.0)[0] == PROBE_FAILING
    # A server stuck answering 503 "loading" does not warm up again...
    s.on_probe(Probe.LOADING, 61.0)
    assert not s.warming
    # ...until it is unreachable (a restart) and starts again.
    s.on_probe(Probe.UNREACHABLE, 70.0)
    s.on_probe(Probe.UNAVAILABLE, 71.0)
    assert s.warming


def test_a_healthy_backend_that_restarts_warms_up():
    s = state()
    s.on_probe(Probe.OK, 0.0)
    s.on_probe(Probe.UNREACHABLE, 10.0)  # counted: a crash looks the same
    assert s.probe_fail_streak == 1 and s.probe_healthy
    s.on_probe(Probe.UNAVAILABLE, 20.0)  # listening again, not ready: it restarted
    assert s.warming and not s.probe_healthy


def test_a_loading_answer_warms_up_at_once_but_a_plain_503_is_a_failure():
    s = state()
    s.on_probe(Probe.OK, 0.0)
    s.on_probe(Probe.UNAVAILABLE, 10.0)
    s.on_probe(Probe.UNAVAILABLE, 20.0)
    assert not s.warming and not s.probe_healthy  # overloaded or broken: down by the thresholds
    s.on_probe(Probe.OK, 30.0)
    s.on_probe(Probe.LOADING, 40.0)  # it says it is loading a model
    assert s.warming


def test_timeouts_and_other_errors_never_open_a_window_and_zero_turns_it_off():
    s = state()
    s.on_probe(Probe.FAILED, 0.0)
    assert not s.warming and s.probe_fail_streak == 1
    off = BackendState(policy=HealthPolicy(unhealthy_threshold=1, warmup_timeout_s=0))
    off.on_probe(Probe.LOADING, 0.0)
    assert not off.warming and not off.probe_healthy


def test_booleans_keep_their_old_meaning():
    s = state()
    s.on_probe(False, 0.0)
    s.on_probe(False, 1.0)
    assert not s.probe_healthy and not s.warming
    s.on_probe(True, 2.0)
    assert s.probe_healthy
