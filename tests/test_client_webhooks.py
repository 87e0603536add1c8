"""`verify_webhook` on the orchestrator's side: a real desk running a background task POSTs
its user action to an orchestrator on a loopback port, which checks each request with it;
then the same request with its body, secret or timestamp changed is refused, each for its
own reason."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp import web

from bot.clients import InvalidWebhook, verify_webhook
from bot.clients.webhooks import DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER
from tests.conftest import StartDesk
from tests.fake_server import serving

SECRET = "orchestrator-secret-0123456789"


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


async def test_the_desk_s_webhooks_verify_and_changed_ones_do_not(start_desk: StartDesk) -> None:
    received: list[tuple[dict[str, str], bytes]] = []

    async def orchestrator(request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            verify_webhook(SECRET, request.headers, raw)
        except InvalidWebhook as refused:
            return web.Response(status=401, text=str(refused))
        received.append((dict(request.headers), raw))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", orchestrator)
    async with serving(app) as port:
        harness = await start_desk(user_actions={"webhook": {"url": f"http://127.0.0.1:{port}/hook", "secret": SECRET}})
        cid = (await harness.client.post("/api/conversations", json={"background": True})).json()["conversation_id"]
        asked = await harness.tool(cid, "request_user_action", {
            "reason": "verification_code", "details": "We sent a 6-digit code to your phone ending in 42."})
        await harness.desk.settle()
    [(headers, raw)] = received
    event: dict[str, Any] = json.loads(raw)
    assert (event["type"], event["user_action_id"]) == ("user_action_requested", asked["user_action_id"])
    assert headers[DELIVERY_HEADER]
    sent_at = float(headers[TIMESTAMP_HEADER])
    lowered = {k.lower(): v for k, v in headers.items()}
    verify_webhook(SECRET, lowered, raw, now=sent_at + 299)  # any letter case, within the tolerance

    def refusal(secret: str = SECRET, body: bytes = raw, signed: dict[str, str] = headers, **options: Any) -> str:
        with pytest.raises(InvalidWebhook) as refused:
            verify_webhook(secret, signed, body, **options)
        return str(refused.value)

    assert "does not match" in refusal(body=raw.replace(b"verification_code", b"captcha"))
    assert "does not match" in refusal(secret="another-secret-0123456789")
    assert "does not match" in refusal(signed={**headers, SIGNATURE_HEADER: "v1=" + "0" * 64})
    assert "five minutes" in refusal(now=sent_at + 301)  # a replay, long after
    assert "timestamp" in refusal(now=sent_at + 20, tolerance=10)  # a stricter tolerance of your own
    assert "missing" in refusal(signed={k: v for k, v in headers.items() if k != SIGNATURE_HEADER})
