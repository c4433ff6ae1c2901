"""Client-IP allowlists: IPs and CIDRs, IPv4 and IPv6.

An empty allowlist allows everyone. A client address that cannot be parsed is
denied whenever a list is set (AppProxy ClientIPValidator semantics). An
IPv4-mapped IPv6 peer (``::ffff:10.0.0.1``) is matched as its IPv4 address.

A client with no address at all (``""``) is one connected through the
node's Unix socket (router/listen.py): IP-based rules do not apply to it, so
every list allows it; the socket file's mode decides who may connect.
X-Forwarded-For never yields an empty address (router/core/clientip.py).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
log = logging.getLogger(__name__)


def parse_networks(entries: Iterable[str], *, strict: bool = True) -> tuple[Network, ...]:
    """Parse IPs/CIDRs. strict=True raises ValueError on a bad entry (operator
    config); strict=False skips it with a warning (coordinator data)."""
    nets: list[Network] = []
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        try:
            nets.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            if strict:
                raise ValueError(f"not an IP address or CIDR: {entry!r}") from None
            log.warning("ignoring invalid allowed_client_ips entry %r", entry)
    return tuple(nets)


def parse_comma_list(value: str | None) -> tuple[Network, ...]:
    """AppProxy's comma-separated `allowed_client_ips` string (lenient)."""
    if not value:
        return ()
    return parse_networks(value.split(","), strict=False)


def ip_allowed(networks: tuple[Network, ...], client_ip: str | None) -> bool:
    if not networks or client_ip == "":
        return True  # no list, or a Unix-socket client (module doc)
    if not client_ip:
        return False
    try:
        addr = ipaddress.ip_address(client_ip.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return any(addr.version == net.version and addr in net for net in networks)
