"""What a provider's webhook call is before an adapter reads it: the request with its raw
body kept intact for the signature check, and the one way to parse its JSON after that check.
Re-exported by channels/base.py, where the adapters import them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.errors import DeskError


@dataclass(frozen=True)
class WebhookRequest:
    """A provider call, with the raw body kept intact for signature checks."""

    body: bytes
    headers: Mapping[str, str]
    query: Mapping[str, str]
    url: str


class MalformedWebhook(DeskError):
    """A provider call whose signature checked out but whose body is not what the provider
    sends: 400, answered in the usual error shape like a malformed body on /api."""

    code = "invalid_json"
    status = 400


def json_object(body: bytes | str, what: str = "the body") -> dict[str, Any]:
    """The JSON object of a verified provider call. Parse only after the signature is checked
    on the raw bytes; a body that is not a JSON object raises MalformedWebhook."""
    try:
        data = json.loads(body)
    except ValueError:  # UnicodeDecodeError included
        raise MalformedWebhook(f"{what} is not valid JSON") from None
    if not isinstance(data, dict):
        raise MalformedWebhook(f"{what} is JSON but not an object")
    return data
