"""Client address: the peer, unless it is a trusted proxy; then X-Forwarded-For
is walked from the right, skipping trusted hops."""

from __future__ import annotations

import pytest

from router.core.clientip import client_ip
from router.core.ipnets import ip_allowed, parse_networks

TRUSTED = parse_networks(["10.0.0.0/8", "fd00::/8"])


@pytest.mark.parametrize(
    ("peer", "xff", "trusted", "expected"),
    [
        # No trusted proxies: XFF is ignored.
        ("203.0.113.9", "1.1.1.1", (), "203.0.113.9"),
        # Untrusted peer: XFF is ignored (anyone can write it).
        ("203.0.113.9", "1.1.1.1", TRUSTED, "203.0.113.9"),
        # Trusted peer, no header.
        ("10.0.0.2", None, TRUSTED, "10.0.0.2"),
        ("10.0.0.2", " , ", TRUSTED, "10.0.0.2"),
        # One proxy.
        ("10.0.0.2", "198.51.100.7", TRUSTED, "198.51.100.7"),
        # Client-forged leftmost entries are not believed.
        ("10.0.0.2", "6.6.6.6, 198.51.100.7", TRUSTED, "198.51.100.7"),
        # Chains of trusted proxies are skipped.
        (
            "10.0.0.2",
            "6.6.6.6, 198.51.100.7, 10.9.9.9, 10.1.1.1",
            TRUSTED,
            "198.51.100.7",
        ),
        # Every hop trusted: the leftmost.
        ("10.0.0.2", "10.5.5.5, 10.1.1.1", TRUSTED, "10.5.5.5"),
        # IPv6 peer and hops; ports and brackets stripped.
        ("fd00::1", "2001:db8::5", TRUSTED, "2001:db8::5"),
        ("fd00::1", "[2001:db8::5]:443", TRUSTED, "2001:db8::5"),
        ("10.0.0.2", "198.51.100.7:5123", TRUSTED, "198.51.100.7"),
        # IPv4-mapped peer counts as its IPv4 address.
        ("::ffff:10.0.0.2", "198.51.100.7", TRUSTED, "198.51.100.7"),
        # Garbage hop is returned as-is (then matches no allowlist).
        ("10.0.0.2", "unknown", TRUSTED, "unknown"),
        # A Unix-socket client has no address: X-Forwarded-For is never believed, and
        # no hop, however written, is ever the empty address.
        ("", "198.51.100.7", TRUSTED, ""),
        ("10.0.0.2", '"", [], 10.1.1.1', TRUSTED, "10.1.1.1"),
    ],
)
def test_client_ip(peer, xff, trusted, expected):
    assert client_ip(peer, xff, trusted) == expected


def test_ip_rules_do_not_apply_to_a_unix_socket_client():
    """No address (a Unix-socket client) passes every allow-list; an address
    that is not an IP fails every non-empty one."""
    nets = parse_networks(["10.0.0.0/8"])
    assert ip_allowed(nets, "") is True
    assert ip_allowed(nets, "unknown") is False and ip_allowed(nets, None) is False
    assert ip_allowed(nets, "10.1.2.3") is True and ip_allowed(nets, "192.0.2.1") is False
