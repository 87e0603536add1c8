"""Who a request came from, for the limits that count per client (the web chat's new
conversations, the inbox login's failures).

The client address is the socket peer, unless that peer is one of `server.trusted_proxies`;
then X-Forwarded-For is walked from the right. The same list is what `handoff serve` gives
uvicorn, so behind uvicorn the peer is already resolved and this only repeats the rule for
other ASGI servers.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from fastapi import Request

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_networks(proxies: Sequence[Network | str]) -> tuple[Network, ...]:
    """`server.trusted_proxies` as networks (a single address is its /32 or /128)."""
    return tuple(ipaddress.ip_network(str(n), strict=False) for n in proxies)


def _address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(value.strip().strip("[]"))
    except ValueError:
        return None


def client_ip(request: Request, trusted_proxies: Sequence[Network] = ()) -> str:
    """The address a request came from: the socket peer, unless that peer is a trusted
    proxy; then X-Forwarded-For is read from the right (each trusted proxy appended the
    address it saw) and the first address that is not a trusted proxy is the client.
    Whatever a client wrote further left is never believed."""
    peer = request.client.host if request.client else ""
    hops = [hop for value in request.headers.getlist("x-forwarded-for") for hop in value.split(",")]
    current = peer
    while hops:
        address = _address(current)
        if address is None or not any(address in network for network in trusted_proxies):
            break
        nxt = hops.pop().strip()
        if _address(nxt) is None:
            break  # garbage from the proxy chain: stop at the last address we could check
        current = nxt
    return current


def address_key(ip: str) -> str:
    """What one client is, for counting: an IPv4 address, or an IPv6 /64 (one host or home
    network usually holds a whole /64, so counting single IPv6 addresses counts nothing)."""
    address = _address(ip)
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address) if address is not None else ip or "unknown"
