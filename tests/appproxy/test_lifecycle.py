"""The tick's pure decision: register, heartbeat, reconcile, backoff."""

from __future__ import annotations

from appproxy.lifecycle import HEARTBEAT, RECONCILE, REGISTER, View, backoff, due

BOOT = "boot-1"


def decide(view: View, now: float = 1000.0, hb: float = 10.0, rc: float = 15.0):
    return due(view, boot_id=BOOT, now=now, heartbeat_period=hb, reconcile_interval=rc)


def test_fresh_node_registers_first():
    assert decide(View()) == (REGISTER,)


def test_another_process_registration_means_register_again():
    """A restarted tasks process (new boot id) registers and pulls in full."""
    view = View(worker_id="w", node_id="boot-0", last_heartbeat=999.0, last_pull=999.0)
    assert decide(view) == (REGISTER,)


def test_registered_node_heartbeats_and_pulls_on_their_periods():
    fresh = View(worker_id="w", node_id=BOOT, last_heartbeat=995.0, last_pull=991.0)
    assert decide(fresh) == ()
    assert decide(fresh, now=1006.0) == (HEARTBEAT, RECONCILE)
    assert decide(fresh, now=1004.8) == (HEARTBEAT,)  # within the tick slack
    assert decide(View(worker_id="w", node_id=BOOT)) == (HEARTBEAT, RECONCILE)


def test_requested_pull_is_due_at_once():
    view = View(worker_id="w", node_id=BOOT, last_heartbeat=999.0, last_pull=999.0, pull_requested=True)
    assert decide(view) == (RECONCILE,)


def test_backoff_blocks_every_call():
    view = View(worker_id="", retry_at=1001.0)
    assert decide(view) == ()
    assert decide(view, now=1001.0) == (REGISTER,)


def test_backoff_is_exponential_and_capped():
    assert [backoff(n, cap=10.0) for n in range(0, 7)] == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    assert backoff(1000, cap=10.0) == 10.0
