"""Telegram's own rules, written down once: how long a message may be, which header and
ports a webhook uses, which updates we ask for, and which URLs Telegram will not call or
put behind a button (a refused URL would fail the whole request, so we check first)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlparse

MESSAGE_LIMIT = 4096  # visible characters (UTF-16 code units) after entity parsing
CALLBACK_DATA_LIMIT = 64  # bytes of a button's callback_data
SECRET_HEADER = "x-telegram-bot-api-secret-token"
ALLOWED_UPDATES = ["message", "callback_query"]
WEBHOOK_PORTS = (80, 88, 443, 8443)  # the only ports Telegram delivers webhooks to


def _is_loopback_or_private(host: str) -> bool:
    if host in ("localhost", "") or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def webhook_unreachable_reason(url: str) -> str | None:
    """Why Telegram could not deliver to this webhook URL, or None when it could."""
    parsed = urlparse(url)
    if parsed.scheme != "https":
        return "Telegram only calls https:// webhooks"
    if _is_loopback_or_private(parsed.hostname or ""):
        return f"Telegram cannot reach {parsed.hostname} from the internet"
    if parsed.port not in (None, *WEBHOOK_PORTS):
        return f"Telegram only calls webhooks on ports {', '.join(map(str, WEBHOOK_PORTS))}"
    return None


def button_url_ok(url: str) -> bool:
    """Telegram refuses a URL button to a loopback address ("Wrong HTTP URL"), which would
    fail the whole dispatch; the link is in the text either way."""
    parsed = urlparse(url)
    return parsed.scheme in ("http", "https") and not _is_loopback_or_private(parsed.hostname or "")

