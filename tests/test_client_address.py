"""Who a request came from (bot/web/client_address.py): the peer, or what trusted proxies say."""

from __future__ import annotations

from ipaddress import ip_network

from starlette.requests import Request

from bot.web.client_address import address_key, client_ip, trusted_networks


def test_the_client_address_believes_only_trusted_proxies() -> None:
    def request(peer: str, *forwarded: str) -> Request:
        headers = [(b"x-forwarded-for", value.encode()) for value in forwarded]
        return Request({"type": "http", "method": "POST", "path": "/", "headers": headers, "client": (peer, 5000)})

    proxies = [ip_network("10.0.0.0/8"), ip_network("fd00::/8")]
    assert client_ip(request("198.51.100.7", "203.0.113.9")) == "198.51.100.7"  # no trusted proxies: the peer
    assert client_ip(request("198.51.100.7", "203.0.113.9"), proxies) == "198.51.100.7"  # the peer is no proxy
    assert client_ip(request("10.0.0.2", "203.0.113.9"), proxies) == "203.0.113.9"
    # a client's own made-up entries sit left of what our proxies appended: never read
    assert client_ip(request("10.0.0.2", "1.2.3.4, 203.0.113.9, 10.0.0.5"), proxies) == "203.0.113.9"
    assert client_ip(request("10.0.0.2", "1.2.3.4", "203.0.113.9"), proxies) == "203.0.113.9"  # two header lines
    assert client_ip(request("10.0.0.2", "1.2.3.4, not-an-ip"), proxies) == "10.0.0.2"
    assert client_ip(request("fd00::1", "2001:db8::1"), proxies) == "2001:db8::1"
    assert client_ip(request("10.0.0.2"), proxies) == "10.0.0.2"
    assert address_key("2001:db8:1:2:aaaa::1") == address_key("2001:db8:1:2:bbbb::9") == "2001:db8:1:2::/64"
    assert address_key("::ffff:198.51.100.7") == "198.51.100.7"
    assert address_key("198.51.100.7") == "198.51.100.7"


def test_trusted_proxies_read_as_networks() -> None:
    assert trusted_networks(["127.0.0.1", "10.0.0.0/8", "::1"]) == (
        ip_network("127.0.0.1/32"), ip_network("10.0.0.0/8"), ip_network("::1/128"))
