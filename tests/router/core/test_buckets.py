"""Token buckets (router/core/buckets.py): burst, refill, all or nothing,
tokens charged after the answer, bounded memory, and who bypasses."""

from __future__ import annotations

import math

import pytest

from router.core.buckets import ALWAYS, ClientLimits, NodeBuckets, Quota, Rate, request_items, token_item
from router.core.ipnets import parse_networks

ONE_A_SECOND = Rate(per_s=1.0, burst=3.0)


def test_a_new_bucket_holds_its_burst_then_refills_at_its_rate() -> None:
    b = NodeBuckets()
    item = ("x", ONE_A_SECOND, 1.0, 1.0)
    assert [b.take([item], 100.0)[0] for _ in range(3)] == [0.0, 0.0, 0.0]
    wait, worst = b.take([item], 100.0)
    assert (wait, worst) == (pytest.approx(1.0), 0)
    assert b.take([item], 100.5)[0] == pytest.approx(0.5)  # half a token back: half a second to go
    assert b.take([item], 101.0) == (0.0, -1)
    assert b.take([item], 1000.0) == (0.0, -1)  # a long idle refills to the burst, not past it
    assert b.take([item], 1000.0) == (0.0, -1)
    assert b.take([item], 1000.0) == (0.0, -1)
    assert b.take([item], 1000.0)[0] > 0


def test_a_take_is_all_or_nothing_and_names_the_bucket_that_waits_longest() -> None:
    b = NodeBuckets()
    roomy = ("roomy", Rate(per_s=1.0, burst=10.0), 1.0, 1.0)
    tight = ("tight", Rate(per_s=0.1, burst=1.0), 1.0, 1.0)
    assert b.take([roomy, tight], 0.0) == (0.0, -1)
    wait, worst = b.take([roomy, tight], 0.0)
    assert worst == 1 and wait == pytest.approx(10.0)
    for _ in range(9):  # the refused take cost the roomy bucket nothing: 9 tokens are left
        assert b.take([roomy], 0.0) == (0.0, -1)
    assert b.take([roomy], 0.0)[0] > 0


def test_tokens_are_charged_after_the_answer_down_to_one_burst_of_debt() -> None:
    """A tpm bucket admits while it is not in debt; the answer's tokens are
    charged whatever the level, and the debt is floored at one burst."""
    b = NodeBuckets()
    quota = Quota(tpm=Rate(per_s=100 / 60, burst=100.0))
    admit = request_items("gpt", quota)
    assert admit == [("b:gpt:t", quota.tpm, 0.0, 1.0)]
    assert b.take(admit, 0.0) == (0.0, -1)
    charge = token_item("gpt", quota, 150)
    assert charge is not None and charge[3] == ALWAYS
    assert b.take([charge], 0.0) == (0.0, -1)  # charged although only 100 were there
    wait, _ = b.take(admit, 0.0)
    assert wait == pytest.approx(51 / (100 / 60))  # from -50 back to 1 token
    b.take([token_item("gpt", quota, 10_000)], 0.0)  # type: ignore[list-item]
    assert b.take(admit, 0.0)[0] == pytest.approx(101 / (100 / 60))  # -100 at most
    assert token_item("gpt", quota, 0) is None
    assert token_item("gpt", Quota(rps=ONE_A_SECOND), 10) is None


def test_the_store_is_bounded_least_recently_used_first() -> None:
    b = NodeBuckets(max_buckets=100)
    rate = Rate(per_s=0.001, burst=1.0)
    b.take([("keep", rate, 1.0, 1.0)], 0.0)
    for i in range(500):
        b.take([(f"ip:{i}", rate, 1.0, 1.0)], 0.0)
        if i % 50 == 0:
            assert b.take([("keep", rate, 1.0, 1.0)], 0.0)[0] > 0  # used: kept, still empty
    assert len(b) == 100


def test_client_limits_bucket_per_address_and_bypass() -> None:
    limits = ClientLimits(
        total=Rate(per_s=10.0, burst=10.0), per_ip=ONE_A_SECOND,
        bypass_networks=parse_networks(["10.0.0.0/8", "2001:db8::/32"]), bypass_keys=frozenset({"ci"}),
    )
    named = limits.items("192.0.2.7", anonymous=True)
    assert [(item[0], which) for item, which in named] == [("g", "global"), ("ip:192.0.2.7", "per_ip")]
    assert [which for _, which in limits.items("192.0.2.7", anonymous=False)] == ["global"]  # a key's own limit applies
    assert [which for _, which in limits.items("", anonymous=True)] == ["global"]  # a Unix-socket client
    # One bucket per address however it is written; an IPv6 host's /64 is one client.
    assert limits.items("::ffff:192.0.2.7", anonymous=True)[1][0][0] == "ip:192.0.2.7"
    a = limits.items("2001:DB8:0:1::5", anonymous=True)[1][0][0]
    assert a == limits.items("2001:db8:0:1:ffff::9", anonymous=True)[1][0][0] == "ip:2001:db8:0:1::/64"
    assert limits.bypassed("10.1.2.3", None, None)
    assert limits.bypassed("2001:db8:5::1", None, None)
    assert not limits.bypassed("192.0.2.7", None, None)
    assert not limits.bypassed("", None, None)  # no address: no network names it
    assert limits.bypassed("192.0.2.7", "ci", "operator:3")
    assert limits.bypassed("192.0.2.7", "other", "ci")  # by id too
    assert not limits.bypassed("192.0.2.7", "other", "operator:4")


def test_a_clock_behind_refills_nothing_and_a_zero_rate_waits_forever() -> None:
    b = NodeBuckets()
    item = ("x", Rate(per_s=1.0, burst=1.0), 1.0, 1.0)
    assert b.take([item], 50.0) == (0.0, -1)
    assert b.take([item], 40.0)[0] > 0  # an earlier clock: no refill, no crash
    assert b.take([item], 51.0) == (0.0, -1)
    stuck = ("y", Rate(per_s=0.0, burst=1.0), 1.0, 1.0)
    b.take([stuck], 0.0)
    assert math.isinf(b.take([stuck], 1e9)[0])
