"""The client address an IP allowlist is checked against.

Rule (the "rightmost untrusted hop" rule, as nginx `real_ip_recursive on`):

1. If no trusted proxies are configured, or the TCP peer is not one of them,
   the answer is the peer address. X-Forwarded-For is then ignored, because
   anybody can write it.
2. Otherwise walk X-Forwarded-For from the right (the hop closest to us) to
   the left, skipping addresses inside a trusted network; the first address
   that is not trusted is the client. Entries left of it were written by
   parties we do not trust and are never used.
3. If every listed hop is trusted, the leftmost hop is the client; if the
   header is absent or empty, the peer is.

A hop is normalised to a bare address (`[2001:db8::1]:443` → `2001:db8::1`,
`203.0.113.7:5123` → `203.0.113.7`). A hop that is not an IP address at all
(`unknown`, an obfuscated RFC 7239 name) is returned as-is; it then matches no
allowlist entry, so a key with an allowlist is refused (fail closed).
The `Forwarded` header is not consulted.
"""

from __future__ import annotations

import ipaddress

from .ipnets import Network, ip_allowed


def _normalise(hop: str) -> str:
    hop = hop.strip().strip('"')
    if hop.startswith("["):  # [v6] or [v6]:port
        end = hop.find("]")
        if end > 0:
            return hop[1:end]
    try:
        ipaddress.ip_address(hop.split("%", 1)[0])
        return hop
    except ValueError:
        pass
    host, sep, port = hop.rpartition(":")
    if sep and port.isdigit() and host.count(":") == 0:  # v4:port
        return host
    return hop


def _trusted(addr: str, trusted: tuple[Network, ...]) -> bool:
    return ip_allowed(trusted, addr)


def client_ip(peer: str, xff: str | None, trusted: tuple[Network, ...]) -> str:
    """The client address for `peer` given X-Forwarded-For and trusted proxies."""
    if not trusted or not peer or not xff or not _trusted(peer, trusted):
        return peer
    hops = [h for h in (_normalise(h) for h in xff.split(",")) if h]
    if not hops:
        return peer
    for hop in reversed(hops):
        if not _trusted(hop, trusted):
            return hop
    return hops[0]
