"""Runtime health of one backend: EWMA, passive breaker, active probes."""

from __future__ import annotations

import pytest
from immutables import Map

from router.core.health import BackendState, HealthPolicy, StateTable

POLICY = HealthPolicy(failure_threshold=3, cooldown_s=10.0, max_cooldown_s=25.0)


def fail(state: BackendState, now: float, times: int = 1) -> None:
    for _ in range(times):
        state.on_start()
        state.on_failure(now)


def test_new_state_is_usable_idle_and_unmeasured() -> None:
    """A fresh backend is healthy, closed, idle and has no latency yet."""
    s = BackendState()
    assert s.usable(0.0)
    assert s.in_flight == 0 and s.ewma_ms is None
    assert s.breaker == "closed"


def test_first_latency_sample_seeds_the_ewma_then_alpha_blends() -> None:
    """EWMA = alpha * sample + (1 - alpha) * previous; the first sample seeds it."""
    s = BackendState(policy=HealthPolicy(ewma_alpha=0.3))
    s.on_start()
    s.on_success(100.0, 0.0)
    assert s.ewma_ms == 100.0
    s.on_start()
    s.on_success(200.0, 1.0)
    assert s.ewma_ms == pytest.approx(0.3 * 200 + 0.7 * 100)
    s.on_start()
    s.on_success(50.0, 2.0)
    assert s.ewma_ms == pytest.approx(0.3 * 50 + 0.7 * 130)


def test_lifecycle_tracks_in_flight_and_counters() -> None:
    """on_start adds one in flight; success, failure and cancel each remove one."""
    s = BackendState()
    for _ in range(3):
        s.on_start()
    assert s.in_flight == 3 and s.total == 3
    s.on_success(1.0, 0.0)
    s.on_failure(0.0)
    s.on_cancel()
    assert s.in_flight == 0 and s.failures == 1
    s.on_cancel()
    assert s.in_flight == 0, "in-flight never goes below zero"


def test_has_capacity() -> None:
    """Capacity None is unlimited; otherwise in_flight must be below it."""
    s = BackendState()
    assert s.has_capacity(None)
    s.on_start()
    assert s.has_capacity(2)
    s.on_start()
    assert not s.has_capacity(2)
    assert not s.has_capacity(0)


def test_breaker_opens_after_threshold_consecutive_failures() -> None:
    """Two failures keep it closed; the third opens it for cooldown_s."""
    s = BackendState(policy=POLICY)
    fail(s, 100.0, 2)
    assert s.usable(100.0)
    fail(s, 100.0)
    assert s.breaker == "open"
    assert not s.usable(100.0)
    assert not s.usable(109.9)
    assert s.usable(110.0)


def test_a_success_resets_the_consecutive_failure_count() -> None:
    """Failures must be consecutive to open the breaker."""
    s = BackendState(policy=POLICY)
    fail(s, 0.0, 2)
    s.on_start()
    s.on_success(5.0, 0.0)
    fail(s, 0.0, 2)
    assert s.usable(0.0)


def test_half_open_admits_exactly_one_trial() -> None:
    """After the cooldown one request goes through; others wait for its verdict."""
    s = BackendState(policy=POLICY)
    fail(s, 0.0, 3)
    assert s.usable(10.0)
    s.on_start()  # the trial
    assert s.breaker == "half_open"
    assert not s.usable(10.0)
    assert not s.usable(1000.0)


def test_trial_success_closes_the_breaker() -> None:
    """A successful trial closes the breaker and resets the backoff."""
    s = BackendState(policy=POLICY)
    fail(s, 0.0, 3)
    s.on_start()
    s.on_success(12.0, 10.0)
    assert s.breaker == "closed"
    assert s.usable(10.0)
    assert s.consecutive_failures == 0
    fail(s, 20.0, 3)
    assert s.open_until == pytest.approx(30.0), "cooldown back to base"


def test_trial_failure_reopens_with_a_longer_cooldown_up_to_the_cap() -> None:
    """Each failed trial multiplies the cooldown by backoff, capped at max."""
    s = BackendState(policy=POLICY)
    fail(s, 0.0, 3)
    assert s.open_until == pytest.approx(10.0)
    fail(s, 10.0)  # trial fails
    assert s.open_until == pytest.approx(30.0)  # 20 s
    assert not s.usable(29.0) and s.usable(30.0)
    fail(s, 30.0)
    assert s.open_until == pytest.approx(55.0)  # 40 s capped to 25 s
    fail(s, 55.0)
    assert s.open_until == pytest.approx(80.0)


def test_cancelled_trial_lets_another_trial_through() -> None:
    """A trial ending without a verdict frees the half-open slot."""
    s = BackendState(policy=POLICY)
    fail(s, 0.0, 3)
    s.on_start()
    s.on_cancel()
    assert s.usable(10.0)
    assert s.breaker == "open"


def test_late_failure_of_a_request_started_before_opening_does_not_extend() -> None:
    """Failures of old requests while open (no trial) do not push the cooldown."""
    s = BackendState(policy=POLICY)
    for _ in range(4):
        s.on_start()
    for _ in range(3):
        s.on_failure(0.0)
    s.on_failure(5.0)
    assert s.open_until == pytest.approx(10.0)


def test_probe_marks_unhealthy_after_n_failures_and_healthy_after_m_oks() -> None:
    """unhealthy_threshold consecutive failed probes remove it; healthy_threshold
    consecutive good ones bring it back."""
    s = BackendState(policy=HealthPolicy(unhealthy_threshold=3, healthy_threshold=2))
    s.on_probe(False, 0.0)
    s.on_probe(False, 1.0)
    s.on_probe(True, 2.0)  # streak broken
    s.on_probe(False, 3.0)
    s.on_probe(False, 4.0)
    assert s.usable(4.0)
    s.on_probe(False, 5.0)
    assert not s.probe_healthy and not s.usable(5.0)
    s.on_probe(True, 6.0)
    s.on_probe(False, 7.0)
    s.on_probe(True, 8.0)
    assert not s.usable(8.0)
    s.on_probe(True, 9.0)
    assert s.usable(9.0)
    assert s.last_probe_at == 9.0


def test_probe_unhealthy_blocks_even_with_closed_breaker() -> None:
    """usable needs both probe health and the breaker."""
    s = BackendState(probe_healthy=False)
    assert s.breaker == "closed"
    assert not s.usable(0.0)


def test_probe_defaults() -> None:
    """The policy carries the probe path as data; which kind uses it is the
    provider registry's business (tests/router/providers/test_registry.py)."""
    p = HealthPolicy()
    assert p.path == "/v1/models"
    assert (p.interval_s, p.timeout_s) == (10, 2)
    assert not hasattr(p, "probe_path") and not hasattr(p, "ollama_path")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"failure_threshold": 0},
        {"healthy_threshold": 0},
        {"ewma_alpha": 0.0},
        {"ewma_alpha": 1.5},
        {"cooldown_s": 30.0, "max_cooldown_s": 10.0},
        {"backoff": 0.5},
        {"interval_s": 0},
    ],
)
def test_invalid_policy_fails_loudly(kwargs: dict[str, float]) -> None:
    """A nonsensical policy is rejected at construction."""
    with pytest.raises(ValueError):
        HealthPolicy(**kwargs)  # type: ignore[arg-type]


def test_state_table_creates_lazily_and_retains_only_named() -> None:
    """get() creates once and returns the same object; retain drops the rest."""
    policy = HealthPolicy(failure_threshold=1)
    table = StateTable(policy)
    a = table.get("a")
    assert table.get("a") is a
    assert a.policy is policy
    table.get("b")
    table.get("c")
    table.retain(["a", "c", "zzz"])
    assert "b" not in table and "a" in table and len(table) == 2
    assert table.get("a") is a
    assert table.peek("b") is None
    # a snapshot's backends (a persistent map), as the runtime passes them; keys and a generator too
    table.get("a")
    table.retain(Map({"c": object(), "x": object()}))
    assert "a" not in table and "c" in table and len(table) == 1
    table.retain({"c": object()}.keys())
    assert "c" in table and len(table) == 1
    table.retain(n for n in ["zzz"])
    assert len(table) == 0


def test_state_table_set_policy_reaches_existing_states() -> None:
    """A reloaded policy applies to states created before it."""
    table = StateTable()
    a = table.get("a")
    new = HealthPolicy(failure_threshold=1)
    table.set_policy(new)
    assert a.policy is new and table.get("b").policy is new
    assert dict(table.items()).keys() == {"a", "b"}
