"""bot/runtime/signed_http.py: the signature scheme the desk's outgoing POSTs carry (the
webhook agent, declared actions, user actions) and `verify`, the receiver's check.

The endpoint is httpx's own MockTransport (the remote side, not our code), so each answer
is scripted and no test waits: a Retry-After of 0 lets the retries run at once."""

from __future__ import annotations

import hashlib
import hmac
import json

import httpx
import pytest

from bot.runtime.signed_http import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    TOLERANCE_SECONDS,
    InvalidSignature,
    answer_of,
    as_object,
    post_signed,
    retry_after,
    sign,
    signed_headers,
    verify,
)

SECRET = "a-shared-secret-of-the-owner"
BODY = json.dumps({"type": "turn", "text": "Grüße 👋"}, ensure_ascii=False).encode()
NOW = 1_800_000_000


def headers_at(timestamp: int, body: bytes = BODY, secret: str = SECRET) -> dict[str, str]:
    return {TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: sign(secret, timestamp, body)}


def test_the_signature_is_hmac_sha256_over_the_timestamp_a_dot_and_the_raw_body() -> None:
    expected = hmac.new(SECRET.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert sign(SECRET, NOW, BODY) == f"v1={expected}"


def test_a_fresh_request_signed_with_the_secret_passes_in_any_header_case() -> None:
    verify(SECRET, headers_at(NOW), BODY, now=NOW)
    verify(SECRET, {k.lower(): v for k, v in headers_at(NOW).items()}, BODY, now=NOW)
    verify(SECRET, {k.upper(): v for k, v in headers_at(NOW).items()}, BODY, now=NOW)


@pytest.mark.parametrize(("body", "secret"), [
    (BODY.replace("Grüße".encode(), b"Gruesse"), SECRET),  # the body changed after signing
    (BODY + b" ", SECRET),  # even by one byte
    (BODY, "another-secret-entirely"),  # signed by someone else
])
def test_a_changed_body_or_another_secret_does_not_match(body: bytes, secret: str) -> None:
    with pytest.raises(InvalidSignature, match="does not match the body"):
        verify(SECRET, headers_at(NOW, secret=secret), body, now=NOW)


@pytest.mark.parametrize("signature", ["", "v1=", "v0=" + "0" * 64, "v1=sïgnätüre", "not a signature at all"])
def test_an_empty_forged_or_non_ascii_signature_is_refused_not_a_crash(signature: str) -> None:
    headers = {TIMESTAMP_HEADER: str(NOW), SIGNATURE_HEADER: signature}
    with pytest.raises(InvalidSignature):
        verify(SECRET, headers, BODY, now=NOW)


@pytest.mark.parametrize("headers", [
    {},
    {SIGNATURE_HEADER: sign(SECRET, NOW, BODY)},
    {TIMESTAMP_HEADER: str(NOW)},
    {TIMESTAMP_HEADER: "soon", SIGNATURE_HEADER: sign(SECRET, NOW, BODY)},
    {TIMESTAMP_HEADER: f"-{NOW}", SIGNATURE_HEADER: sign(SECRET, NOW, BODY)},
])
def test_a_missing_or_malformed_header_is_named(headers: dict[str, str]) -> None:
    with pytest.raises(InvalidSignature, match=f"missing {TIMESTAMP_HEADER} or {SIGNATURE_HEADER}"):
        verify(SECRET, headers, BODY, now=NOW)


def test_a_timestamp_in_non_ascii_digits_is_refused() -> None:
    """str.isdigit() accepts "١٢٣" and int() reads it as 123, so it is refused as stale rather
    than as malformed; refused either way."""
    with pytest.raises(InvalidSignature):
        verify(SECRET, {TIMESTAMP_HEADER: "١٢٣", SIGNATURE_HEADER: sign(SECRET, 123, BODY)}, BODY, now=NOW)


@pytest.mark.parametrize("offset", [-TOLERANCE_SECONDS - 1, TOLERANCE_SECONDS + 1, -86_400])
def test_a_stale_or_future_timestamp_is_refused_as_a_replay(offset: int) -> None:
    """A request recorded and sent again later carries its old timestamp and signature."""
    with pytest.raises(InvalidSignature, match="more than five minutes off"):
        verify(SECRET, headers_at(NOW), BODY, now=NOW + offset)


@pytest.mark.parametrize("offset", [-TOLERANCE_SECONDS, TOLERANCE_SECONDS])
def test_the_tolerance_is_inclusive_at_five_minutes(offset: int) -> None:
    verify(SECRET, headers_at(NOW), BODY, now=NOW + offset)


def test_a_replayed_timestamp_cannot_be_moved_forward_without_the_secret() -> None:
    old = headers_at(NOW - 3600)
    moved = {**old, TIMESTAMP_HEADER: str(NOW)}
    with pytest.raises(InvalidSignature, match="does not match the body"):
        verify(SECRET, moved, BODY, now=NOW)


def test_signed_headers_verify_and_carry_the_delivery_only_when_given() -> None:
    headers = signed_headers(SECRET, BODY, "dl_1")
    verify(SECRET, headers, BODY)
    assert headers[DELIVERY_HEADER] == "dl_1"
    assert headers["Content-Type"] == "application/json"
    assert DELIVERY_HEADER not in signed_headers(SECRET, BODY, None)


class Endpoint:
    """The owner's endpoint: answers each request with the next scripted status, recording it."""

    def __init__(self, *statuses: int, retry_after: str = "0") -> None:
        self.statuses, self.retry_after = list(statuses), retry_after
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        verify(SECRET, dict(request.headers), request.content)  # every attempt is signed afresh
        return httpx.Response(self.statuses.pop(0), headers={"Retry-After": self.retry_after})

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self))


async def test_429_and_5xx_are_retried_with_the_same_delivery_id_until_an_answer() -> None:
    endpoint = Endpoint(503, 429, 200)
    async with endpoint.client() as client:
        response = await post_signed(client, "http://owner.test/turn", BODY, secret=SECRET, delivery="dl_7", attempts=3)
    assert response.status_code == 200
    assert len(endpoint.requests) == 3
    assert {r.headers[DELIVERY_HEADER] for r in endpoint.requests} == {"dl_7"}  # the receiver can drop a repeat
    assert {r.content for r in endpoint.requests} == {BODY}


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_a_client_error_is_returned_at_once_not_retried(status: int) -> None:
    endpoint = Endpoint(status, 200)
    async with endpoint.client() as client:
        response = await post_signed(client, "http://owner.test/turn", BODY, secret=SECRET, delivery=None, attempts=3)
    assert response.status_code == status
    assert len(endpoint.requests) == 1


async def test_the_last_error_answer_is_returned_when_the_attempts_run_out() -> None:
    endpoint = Endpoint(500, 502)
    async with endpoint.client() as client:
        response = await post_signed(client, "http://owner.test/turn", BODY, secret=SECRET, delivery=None, attempts=2)
    assert response.status_code == 502
    assert len(endpoint.requests) == 2


async def test_no_answer_at_all_raises_the_httpx_error() -> None:
    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(unreachable)) as client:
        with pytest.raises(httpx.ConnectError):
            await post_signed(client, "http://owner.test/turn", BODY, secret=SECRET, delivery=None, attempts=1)


@pytest.mark.parametrize(("response", "answer"), [
    (httpx.Response(200, json={"refund_id": "rf_1"}), {"refund_id": "rf_1"}),
    (httpx.Response(200, json=[1, 2]), {"value": [1, 2]}),
    (httpx.Response(200, content=b"null"), {"value": None}),
    (httpx.Response(204), {"status": 204, "body": ""}),
    (httpx.Response(200, text="ok, refunded"), {"status": 200, "body": "ok, refunded"}),
], ids=["object", "array", "null", "empty", "text"])
def test_what_an_endpoint_answered_is_always_a_json_object(response: httpx.Response, answer: dict[str, object]) -> None:
    assert answer_of(response) == answer


def test_a_result_that_is_not_json_is_kept_as_its_repr() -> None:
    assert as_object({"id": 1}) == {"id": 1}
    assert as_object(object)["value"] == repr(object)


@pytest.mark.parametrize(("header", "pause"), [("3", 3.0), ("0", 0.0), ("-5", 0.0), ("3600", 32.0), ("soon", None), (None, None)])
def test_the_pause_an_endpoint_asks_for_is_capped_and_a_malformed_one_ignored(header: str | None, pause: float | None) -> None:
    assert retry_after(httpx.Response(503, headers={"Retry-After": header} if header is not None else {})) == pause
