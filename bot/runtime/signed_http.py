"""Signed JSON POSTs to the owner's endpoints: the webhook agent's turns, actions, and the
orchestrator of background user actions. One signature scheme, one retry policy.

`X-Handoff-Signature: v1=<hex HMAC-SHA256(secret, "<X-Handoff-Timestamp>." + raw body)>`;
the receiver checks it with `verify()` and refuses requests older than five minutes.
`X-Handoff-Delivery` is the same for every retry of one request, so a repeat can be dropped.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

import httpx
import structlog

log = structlog.get_logger(__name__)

SIGNATURE_HEADER = "X-Handoff-Signature"
TIMESTAMP_HEADER = "X-Handoff-Timestamp"
DELIVERY_HEADER = "X-Handoff-Delivery"
TOLERANCE_SECONDS = 300
MAX_BACKOFF_SECONDS = 8.0
MAX_RETRY_AFTER_SECONDS = 32.0


class InvalidSignature(Exception):
    """The request was not signed with the shared secret, or is too old to trust."""


def sign(secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"v1={digest}"


def verify(secret: str, headers: Mapping[str, str], body: bytes, *, now: float | None = None,
           tolerance: float = TOLERANCE_SECONDS) -> None:
    """For the owner's side: raise InvalidSignature unless the request came from the desk.
    Check the raw body, before parsing it. `headers` may use any letter case."""
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ts, signature = lowered.get(TIMESTAMP_HEADER.lower(), ""), lowered.get(SIGNATURE_HEADER.lower(), "")
    if not raw_ts.isdigit() or not signature:
        raise InvalidSignature(f"missing {TIMESTAMP_HEADER} or {SIGNATURE_HEADER}")
    if abs((time.time() if now is None else now) - int(raw_ts)) > tolerance:
        raise InvalidSignature("the timestamp is more than five minutes off: a replay, or a clock to fix")
    if not hmac.compare_digest(signature.encode(), sign(secret, int(raw_ts), body).encode()):
        raise InvalidSignature("the signature does not match the body")


def signed_headers(secret: str, body: bytes, delivery: str | None) -> dict[str, str]:
    timestamp = int(time.time())
    return {
        "Content-Type": "application/json", TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: sign(secret, timestamp, body),
        **({DELIVERY_HEADER: delivery} if delivery else {}),
    }


async def post_signed(client: httpx.AsyncClient, url: str, body: bytes, *, secret: str, delivery: str | None,
                      attempts: int = 1) -> httpx.Response:
    """POST `body` signed (freshly for each attempt), retrying connection errors, timeouts,
    429 and 5xx up to `attempts` times after the Retry-After asked for or a growing pause.
    Returns the last answer (which may be an error status); raises the last httpx error when
    no attempt got an answer."""
    for attempt in range(1, attempts + 1):
        wait: float | None = None
        try:
            response = await client.post(url, content=body, headers=signed_headers(secret, body, delivery))
        except httpx.HTTPError as exc:
            if attempt == attempts:
                raise
            problem = type(exc).__name__
        else:
            if attempt == attempts or not (response.status_code == 429 or response.status_code >= 500):
                return response
            problem, wait = f"answered {response.status_code}", retry_after(response)
        delay = wait if wait is not None else min(MAX_BACKOFF_SECONDS, 0.5 * 2 ** (attempt - 1))
        log.warning("signed_post_retry", url=url, problem=problem, attempt=attempt, retry_in_seconds=delay)
        await asyncio.sleep(delay)
    raise AssertionError("attempts must be at least 1")  # pragma: no cover


def answer_of(response: httpx.Response) -> dict[str, Any]:
    """What an endpoint answered, as a JSON object: its JSON (another JSON value comes as
    {"value": …}), or its status and the start of its body when that is not JSON."""
    try:
        return as_object(response.json())
    except ValueError:
        return {"status": response.status_code, "body": response.text[:2000]}


def as_object(value: Any) -> dict[str, Any]:
    """A result as a JSON object: a dict as it is, anything else as {"value": …} (its repr
    when it is not JSON at all)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        value = repr(value)
    return value if isinstance(value, dict) else {"value": value}


def retry_after(response: httpx.Response) -> float | None:
    """The pause the endpoint asked for (Retry-After in seconds), capped; None without one."""
    try:
        return min(MAX_RETRY_AFTER_SECONDS, max(0.0, float(response.headers.get("retry-after", ""))))
    except ValueError:
        return None
