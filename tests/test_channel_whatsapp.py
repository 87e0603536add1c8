"""The WhatsApp channel: the real twilio SDK against a fake Twilio REST API on 127.0.0.1.

Everything of ours runs for real (desk, outbox, inbound, HTTP API, webhook route); only Twilio
is played by tests/fake_twilio.py, which checks auth, numbers, body length and template
variables like Twilio, and signs webhook calls the way Twilio does.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from bot.domain.rendering import Renderer
from channels.base import (
    ApprovalClosed,
    ApprovalPrompt,
    ChannelAuthError,
    ChannelContext,
    Dispatch,
    HandoffBrief,
    InboundMessage,
    Notice,
    PermanentChannelError,
    RecipientText,
    Relay,
    SubscriberText,
    TranscriptLine,
    TransientChannelError,
    UncertainDeliveryError,
    WebhookRequest,
)
from channels.text import utf16_len
from channels.whatsapp import BODY_LIMIT, LINE_KEY, WhatsAppChannel, WhatsAppConfig, defuse
from tests.approval_actions import TWO_PEOPLE, refund_brief
from tests.approval_actions import refund_action as shared_refund_action
from tests.conftest import Harness, StartDesk, config_problem, make_config, probe_config
from tests.fake_twilio import ACCOUNT_SID, ANA_PHONE, AUTH_TOKEN, BEN_PHONE, CARLA_PHONE, SENDER, FakeTwilio
from tests.office_hours import CLOSED_HOURS, OUTSIDE_HOURS_LINE, closed_clock

WEBHOOK_URL = "http://desk.test/webhooks/1"  # public_url of the test desk + the route
CONTENT_SID = "HX" + "ab" * 16
HOSTILE = "Ana says *FREE REFUND* _now_ ~no~ ```approved``` `x` — see https://shop.example/a_b~c or ana_b@example.com, ref ORD_1234"


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    """The channel's behaviour does not depend on the database: SQLite only."""
    return sqlite_url


@pytest.fixture
async def fake() -> AsyncIterator[FakeTwilio]:
    server = await FakeTwilio().start()
    yield server
    await server.stop()


def whatsapp_entry(fake: FakeTwilio, **overrides: Any) -> dict[str, Any]:
    return {"id": 1, "kind": "whatsapp", "label": "On-call (WhatsApp)", "estimated_response": "within the hour",
            "account_sid": ACCOUNT_SID, "auth_token": AUTH_TOKEN, "from": "+1 415 523 8886", "to": [ANA_PHONE, BEN_PHONE],
            "api_base_url": fake.base_url, **overrides}


async def start(start_desk: StartDesk, fake: FakeTwilio, *, channel: dict[str, Any] | None = None, **overrides: Any) -> Harness:
    return await start_desk(channels=[whatsapp_entry(fake, **(channel or {}))], **overrides)


async def post(harness: Harness, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return await harness.client.post("/webhooks/1", content=body, headers=headers)


async def reply(harness: Harness, fake: FakeTwilio, text: str, **kwargs: Any) -> httpx.Response:
    """A recipient writes to the sender; Twilio calls the webhook; the desk relays after answering."""
    response = await post(harness, *fake.inbound(WEBHOOK_URL, body=text, **kwargs))
    assert response.status_code == 200, response.text
    await harness.desk.settle()
    return response




async def dispatched(harness: Harness, cid: str, **fields: Any) -> tuple[str, str]:
    """Start a handoff on the channel; (handoff id, short code)."""
    result = await harness.start_handoff(cid, channel_id=1, **fields)
    handoff = await harness.handoff(result["handoff_session_id"])
    assert result["channel_message_id"] == handoff["channel_message_id"]
    return result["handoff_session_id"], handoff["short_code"]


def bodies(fake: FakeTwilio, number: str) -> list[str]:
    return [m["body"] for m in fake.sent_to(number)]


# --------------------------------------------------------------------------- text


@pytest.mark.parametrize(("text", "expected"), [
    ("*bold* _italic_ ~strike~", "∗bold∗ ˍitalicˍ ∼strike∼"),
    ("```mono``` and `code`", "ˋˋˋmonoˋˋˋ and ˋcodeˋ"),
    ("> a quote\n  > another", "› a quote\n  › another"),
    ("snake_case_name ORD_1234 2*3", "snake_case_name ORD_1234 2*3"),  # cannot format: left alone
    ("see https://x.example/a_b~c_ and _https://y.example/*x*_", "see https://x.example/a_b~cˍ and ˍhttps://y.example/*x∗ˍ"),
    ("mail first_last@example.com *now*", "mail first_last@example.com ∗now∗"),
    ("nul\x00byte", "nul\ufffdbyte"),
])
def test_defuse_makes_whatsapp_markers_inert_but_keeps_links_and_words(text: str, expected: str) -> None:
    assert defuse(text) == expected


# --------------------------------------------------------------------------- dispatch


async def test_the_dispatch_goes_to_every_number_as_defused_text_with_the_code_and_the_link(
    fake: FakeTwilio, start_desk: StartDesk,
) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation(name="Ana *VIP*")
    await harness.say(cid, "My order _1234_ never came")
    sid, code = await dispatched(harness, cid, urgency="high", summary=HOSTILE, expected_action="Check the *carrier* & tell Ana.",
                                 extra_context={"plan": "~gold~"},
                                 expected_return=[{"name": "eta_date", "type": "date", "required": True, "label": "ETA"}])
    handoff = await harness.handoff(sid)
    [to_ana], [to_ben] = fake.sent_to(ANA_PHONE), fake.sent_to(BEN_PHONE)
    assert to_ana["from"] == SENDER
    assert to_ana["body"] == to_ben["body"]
    assert to_ana["status_callback"] is None
    assert handoff["channel_message_id"] == to_ana["sid"]  # the first configured number's message
    body = to_ana["body"]
    assert body.startswith(f"🔴 *URGENT* · *Handoff #{code}*: Ana ∗VIP∗ needs a person\n")
    assert ("Ana says ∗FREE REFUND∗ ˍnowˍ ∼no∼ ˋˋˋapprovedˋˋˋ ˋxˋ — see https://shop.example/a_b~c or ana_b@example.com, "
            "ref ORD_1234") in body
    assert "*What to do*\nCheck the ∗carrier∗ & tell Ana." in body
    assert "• plan: ∼gold∼" in body
    assert "• ETA [date, YYYY-MM-DD] (required)" in body
    assert f"*Return form* (works once; you may forward it):\n{handoff['form_url']}\n" in body
    assert "Ana ∗VIP∗: My order ˍ1234ˍ never came" in body
    assert f"start with #{code} to address this one" in body
    assert "/release" in body
    assert (await harness.desk.handoffs.get(sid)).thread_key == LINE_KEY


async def test_every_handoff_on_the_channel_shares_the_line_key(fake: FakeTwilio) -> None:
    adapter = WhatsAppChannel(WhatsAppConfig(**whatsapp_entry(fake)))
    await adapter.start(ChannelContext(public_url="http://desk.test", deliver_inbound=_drop, render=Renderer().render))
    try:
        receipts = [await adapter.send(Dispatch(handoff_id=f"hs_{c}0000", text="x", brief=_brief(c)))
                    for c in ("a1b2", "c3d4")]
        relay = await adapter.send(Relay(handoff_id="hs_a1b20000", text="Ana: hi", author="Ana", body="hi"))
    finally:
        await adapter.stop()
    assert {r.thread_key for r in [*receipts, relay]} == {LINE_KEY}
    assert adapter.capabilities.threads is False
    assert adapter.capabilities.webhook
    assert adapter.capabilities.inbound


async def test_a_long_transcript_keeps_the_newest_lines_and_the_link(fake: FakeTwilio, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake, handoff={"transcript_messages": 60})
    cid = await harness.conversation()
    for i in range(20):
        await harness.say(cid, f"message {i:02d}: " + "my parcel is still missing, " * 6)
    sid, _code = await dispatched(harness, cid)
    body = fake.sent_to(ANA_PHONE)[-1]["body"]
    assert utf16_len(body) <= BODY_LIMIT
    assert "earlier messages left out" in body
    assert "message 19:" in body
    assert "message 00:" not in body
    assert (await harness.handoff(sid))["form_url"] in body


async def test_a_brief_at_every_maximum_still_fits_one_message_with_its_link(fake: FakeTwilio, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation()
    fields = [{"name": f"field_{i}", "type": "enum", "enum_values": [f"value {j}" for j in range(20)],
               "description": "d*" * 200, "label": "L" * 100} for i in range(20)]
    sid, code = await dispatched(harness, cid, summary="*_~" * 666, expected_action="x" * 1000,
                                 extra_context={f"key{i}": "~" * 180 for i in range(18)}, expected_return=fields)
    body = fake.sent_to(ANA_PHONE)[-1]["body"]
    assert utf16_len(body) <= BODY_LIMIT
    assert f"#{code}" in body
    assert (await harness.handoff(sid))["form_url"] in body
    assert "Parts of this brief were shortened to fit one WhatsApp message." in body


async def test_with_content_sid_the_dispatch_is_the_approved_template(fake: FakeTwilio, start_desk: StartDesk) -> None:
    variables = {"1": "summary", "2": "expected_action", "3": "link", "4": "short_code"}
    harness = await start(start_desk, fake, channel={"content_sid": CONTENT_SID, "content_variables": variables,
                                                     "status_callback": True})
    cid = await harness.conversation()
    sid, code = await dispatched(harness, cid, summary="Ana's *order*\n\n1234   is     late.\tPlease check it today.",
                                 expected_action="Call the carrier,\nthen tell Ana.")
    request = fake.requests()[-1]
    assert request["ContentSid"] == CONTENT_SID
    assert "Body" not in request
    assert request["StatusCallback"] == WEBHOOK_URL
    assert json.loads(request["ContentVariables"]) == {
        "1": "Ana's ∗order∗ 1234 is late. Please check it today.", "2": "Call the carrier, then tell Ana.",
        "3": (await harness.handoff(sid))["form_url"], "4": f"#{code}",
    }
    assert {m["to"] for m in fake.messages} == {ANA_PHONE, BEN_PHONE}
    # once the recipient has answered the template, relays are ordinary messages
    await reply(harness, fake, "On it.")
    await harness.say(cid, "Thanks!")
    await harness.desk.settle()
    assert bodies(fake, ANA_PHONE)[-1] == f"#{code} *Ana*: Thanks!"


# --------------------------------------------------------------------------- relays and notices


async def test_relays_lead_with_the_short_code_reach_every_number_and_long_ones_come_in_parts(
    fake: FakeTwilio, start_desk: StartDesk,
) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation(name="Ana _the_ *Admin*")
    _sid, code = await dispatched(harness, cid)
    await harness.say(cid, "Any news? *please*")
    await harness.desk.settle()
    assert bodies(fake, ANA_PHONE)[-1] == bodies(fake, BEN_PHONE)[-1] == f"#{code} *Ana ˍtheˍ ∗Admin∗*: Any news? ∗please∗"

    long_text = " ".join(f"w{i:04d} *x*" for i in range(500))  # 4,999 characters: four messages
    await harness.say(cid, long_text)
    await harness.desk.settle()
    parts = bodies(fake, ANA_PHONE)[-4:]
    assert [p.split(": ", 1)[0] for p in parts] == [f"#{code} *Ana ˍtheˍ ∗Admin∗* ({i}/4)" for i in range(1, 5)]
    assert all(utf16_len(p) <= BODY_LIMIT for p in parts)
    assert " ".join(p.split(": ", 1)[1] for p in parts) == defuse(long_text)
    assert bodies(fake, BEN_PHONE)[-4:] == parts


async def test_a_notice_names_its_handoff_once(fake: FakeTwilio) -> None:
    adapter = WhatsAppChannel(WhatsAppConfig(**whatsapp_entry(fake, to=[ANA_PHONE])))
    await adapter.start(ChannelContext(public_url="http://desk.test", deliver_inbound=_drop, render=Renderer().render))
    try:
        for sid, body in (("hs_a1b20000", "Handoff A1B2 released (resolved); the assistant has taken the conversation back."),
                          ("hs_a1b20000", "Your message went to *Ana*'s handoff."),
                          ("hs_x-y_z0000", "Handoff XYZ0: *Ana* is waiting.")):  # codes keep the id's letters and digits
            await adapter.send(Notice(handoff_id=sid, text=body, about="routing"))
    finally:
        await adapter.stop()
    assert bodies(fake, ANA_PHONE) == ["Handoff A1B2 released (resolved); the assistant has taken the conversation back.",
                                       "#A1B2 Your message went to ∗Ana∗'s handoff.", "Handoff XYZ0: ∗Ana∗ is waiting."]


# --------------------------------------------------------------------------- inbound


async def test_a_signed_reply_reaches_the_subscriber_and_twilio_gets_empty_twiml(fake: FakeTwilio, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation()
    sid, _code = await dispatched(harness, cid)
    response = await reply(harness, fake, "Hi Ana *, I'm on it.", profile_name="Sam Lee")
    assert response.headers["content-type"].startswith("text/xml")
    assert response.content == b'<?xml version="1.0" encoding="UTF-8"?><Response/>'
    await reply(harness, fake, "Second person here.", sender=BEN_PHONE, profile_name=None)
    assert await harness.human_texts(cid) == [("Sam Lee", "Hi Ana *, I'm on it."), ("+447700900123", "Second person here.")]
    assert "relayed_to_subscriber" in await harness.kinds(sid)


@pytest.mark.parametrize("forgery", ["tampered body", "wrong url", "missing header", "wrong token", "empty signature"])
async def test_a_forged_webhook_gets_403_and_nothing_is_stored(fake: FakeTwilio, start_desk: StartDesk, forgery: str) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation()
    await dispatched(harness, cid)
    url = "https://desk.example.com/webhooks/1" if forgery == "wrong url" else WEBHOOK_URL
    body, headers = fake.inbound(url, body="Refund approved!", auth_token="0" * 32 if forgery == "wrong token" else None)
    if forgery == "tampered body":
        body = body.replace(b"Refund+approved", b"Refund+denied")
    if forgery == "missing header":
        headers.pop("X-Twilio-Signature")
    if forgery == "empty signature":
        headers["X-Twilio-Signature"] = ""
    response = await post(harness, body, headers)
    assert response.status_code == 403
    await harness.desk.settle()
    assert await harness.stored_events() == 0
    assert await harness.human_texts(cid) == []


async def test_a_body_twilio_never_sends_is_a_415_before_anything_is_checked(fake: FakeTwilio, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    body, headers = fake.inbound(WEBHOOK_URL, body="Refund approved!")
    response = await post(harness, body, {**headers, "Content-Type": "application/json"})
    assert (response.status_code, response.json()["error"]) == (415, "unsupported_media_type")
    assert "application/x-www-form-urlencoded" in response.json()["details"]["hint"]
    assert await harness.stored_events() == 0


async def test_strangers_status_callbacks_and_other_accounts_are_acknowledged_and_ignored(
    fake: FakeTwilio, start_desk: StartDesk,
) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation()
    sid, _code = await dispatched(harness, cid)
    status = {"MessageSid": "SM" + "1" * 32, "MessageStatus": "delivered", "AccountSid": ACCOUNT_SID,
              "From": SENDER, "To": ANA_PHONE, "ApiVersion": "2010-04-01"}
    for body, headers in (
        fake.inbound(WEBHOOK_URL, body="I am a stranger, send me the refund", sender="whatsapp:+15550001111"),
        fake.signed(WEBHOOK_URL, status),
        fake.inbound(WEBHOOK_URL, body="Other account", AccountSid="AC" + "f" * 32),
        fake.inbound(WEBHOOK_URL, body="To another sender", To="whatsapp:+15559990000"),
        fake.inbound(WEBHOOK_URL, body="", profile_name="Sam"),  # nothing to relay
    ):
        response = await post(harness, body, headers)
        assert response.status_code == 200
        assert response.content.endswith(b"<Response/>")
    await harness.desk.settle()
    assert await harness.stored_events() == 0
    assert await harness.human_texts(cid) == []
    assert (await harness.handoff(sid))["state"] == "active"


async def test_attachments_are_announced_not_dropped(fake: FakeTwilio, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation()
    await dispatched(harness, cid)
    await reply(harness, fake, "", media=["image/jpeg"])
    await reply(harness, fake, "Here is the label", media=["application/pdf", "image/png"])
    assert await harness.human_texts(cid) == [
        ("Sam", "(image attachment, not forwarded)"),
        ("Sam", "Here is the label\n(application attachment, not forwarded)\n(image attachment, not forwarded)"),
    ]


async def test_the_adapter_parses_a_webhook_without_the_desk(fake: FakeTwilio) -> None:
    adapter = WhatsAppChannel(WhatsAppConfig(**whatsapp_entry(fake)))
    await adapter.start(ChannelContext(public_url="https://desk.example.com", deliver_inbound=_drop, render=Renderer().render))
    try:
        url = "https://desk.example.com/webhooks/1"
        body, headers = fake.inbound(url, body="#A7F3 done, /release", profile_name="  Sam \n Lee ")
        reply_ = await adapter.handle_webhook(WebhookRequest(body=body, headers={k.lower(): v for k, v in headers.items()},
                                                             query={}, url=url))
    finally:
        await adapter.stop()
    [message] = reply_.messages
    sid = dict(pair.split("=", 1) for pair in body.decode().split("&"))["MessageSid"]
    assert message == RecipientText(thread_key=LINE_KEY, text="#A7F3 done, /release", author="Sam Lee", user_id=ANA_PHONE,
                                    dedupe_key=f"message:{sid}")


# --------------------------------------------------------------------------- provider failures


async def test_outside_the_24_hour_window_the_dispatch_fails_with_a_hint_to_configure_a_template(
    fake: FakeTwilio, start_desk: StartDesk,
) -> None:
    harness = await start(start_desk, fake, channel={"to": [ANA_PHONE]}, delivery={"base_backoff": "1ms"})
    fake.fail(400, 63016, "Failed to send freeform message because you are outside the allowed window. "
                          "If you want to send messages outside the allowed window, please use a Template.")
    cid = await harness.conversation()
    result = await harness.tool(cid, "handoff_request", {
        "channel_id": 1, "summary": "Ana's order #1234 is a week late.", "expected_action": "Check the carrier."})
    assert result["error"] == "dispatch_failed"
    assert result["details"]["attempts"] == 1
    hint = result["details"]["hint"]
    assert "63016" in hint
    assert "content_sid" in hint
    assert "+34600111222" in hint
    assert AUTH_TOKEN not in str(result)
    assert (await harness.handoff(result["details"]["handoff_session_id"]))["state"] == "failed"


async def test_rate_limits_are_retried_by_the_core_after_twilios_delay_and_only_where_needed(
    fake: FakeTwilio, start_desk: StartDesk,
) -> None:
    harness = await start(start_desk, fake, delivery={"base_backoff": "1ms"})
    cid = await harness.conversation()
    sid, code = await dispatched(harness, cid)
    fake.fail(429, 20429, "Too Many Requests", retry_after=7, to=BEN_PHONE)
    await harness.say(cid, "Is anyone there?")
    await harness.desk.settle()
    [retry] = [e for e in await harness.events(sid) if e["kind"] == "delivery_retry_scheduled"]
    assert retry["detail"]["retry_in_seconds"] == 7.0
    assert retry["detail"]["error_type"] == "TransientChannelError"
    harness.desk.clock.advance(timedelta(seconds=8))
    await harness.desk.settle()
    relay = f"#{code} *Ana*: Is anyone there?"
    # Ana's phone got it on the first attempt; the retry went to Ben only
    assert bodies(fake, ANA_PHONE).count(relay) == 1
    assert bodies(fake, BEN_PHONE).count(relay) == 1
    assert sorted(r["To"] for r in fake.requests() if r.get("Body") == relay) == [ANA_PHONE, BEN_PHONE, BEN_PHONE]


async def test_a_twilio_5xx_is_an_uncertain_delivery_and_the_dispatch_is_retried(fake: FakeTwilio, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake, channel={"to": [ANA_PHONE]}, delivery={"base_backoff": "1ms"})
    fake.fail(500, 20500, "Internal Server Error")
    cid = await harness.conversation()
    sid, _code = await dispatched(harness, cid)
    assert len(fake.requests()) == 2
    assert len(fake.messages) == 1
    [retry] = [e for e in await harness.events(sid) if e["kind"] == "delivery_retry_scheduled"]
    assert retry["detail"]["error_type"] == "UncertainDeliveryError"


async def test_error_classes_at_the_adapter(fake: FakeTwilio) -> None:
    adapter = WhatsAppChannel(WhatsAppConfig(**whatsapp_entry(fake, to=[ANA_PHONE])))
    await adapter.start(ChannelContext(public_url="http://desk.test", deliver_inbound=_drop, render=Renderer().render))
    relay = Relay(handoff_id="hs_a1b20000", text="Ana: hi", author="Ana", body="hi")
    cases: list[tuple[tuple[Any, ...], type[Exception], str]] = [
        ((429, 20429, "Too Many Requests"), TransientChannelError, "rate-limited"),
        ((503, 20503, "Service Unavailable"), UncertainDeliveryError, "may have been sent"),
        ((401, 20003, "Authenticate"), ChannelAuthError, "account_sid/auth_token"),
        ((400, 21211, "Invalid 'To' Phone Number"), PermanentChannelError, "not a valid WhatsApp number (21211): check `to`"),
        ((400, 21614, "'To' number is not a valid mobile number"), PermanentChannelError, "check `to`"),
        ((400, 63016, "outside the allowed window"), PermanentChannelError, "Configure content_sid"),
        ((400, 21408, "Permission to send an SMS has not been enabled for the region"), PermanentChannelError, "21408"),
    ]
    try:
        for (status, code, message), error, hint in cases:
            fake.fail(status, code, message, retry_after=3 if status == 429 else None)
            with pytest.raises(error) as caught:
                await adapter.send(relay)
            assert type(caught.value) is error, (code, caught.value.hint)
            assert hint in caught.value.hint, (code, caught.value.hint)
            if status == 429:
                assert caught.value.retry_after == 3.0
    finally:
        await adapter.stop()
    impatient = WhatsAppChannel(WhatsAppConfig(**whatsapp_entry(fake, to=[ANA_PHONE], request_timeout=0.3)))
    await impatient.start(ChannelContext(public_url="http://desk.test", deliver_inbound=_drop, render=Renderer().render))
    fake.hold()  # Twilio stores the message, the answer never comes
    try:
        with pytest.raises(UncertainDeliveryError) as caught:
            await impatient.send(relay)
    finally:
        fake.release()
        await impatient.stop()
    assert "may have been sent" in caught.value.hint
    assert fake.messages[-1]["body"] == "#A1B2 *Ana*: hi"  # it did reach Twilio


async def test_with_a_template_a_relay_outside_the_window_says_the_template_opens_the_conversation(fake: FakeTwilio) -> None:
    adapter = WhatsAppChannel(WhatsAppConfig(**whatsapp_entry(fake, to=[ANA_PHONE], content_sid=CONTENT_SID)))
    await adapter.start(ChannelContext(public_url="http://desk.test", deliver_inbound=_drop, render=Renderer().render))
    fake.fail(400, 63016, "outside the allowed window")
    try:
        with pytest.raises(PermanentChannelError) as caught:
            await adapter.send(Relay(handoff_id="hs_a1b20000", text="Ana: hi", author="Ana", body="hi"))
    finally:
        await adapter.stop()
    assert "messages follow once they answer it" in caught.value.hint
    assert "Configure content_sid" not in caught.value.hint


async def test_one_refused_number_does_not_fail_a_dispatch_that_reached_the_other(fake: FakeTwilio, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    fake.fail(400, 21211, "Invalid 'To' Phone Number", to=BEN_PHONE)
    cid = await harness.conversation()
    sid, code = await dispatched(harness, cid)
    assert len(fake.sent_to(ANA_PHONE)) == 1
    assert fake.sent_to(BEN_PHONE) == []
    assert (await harness.handoff(sid))["state"] == "active"


async def test_an_unreachable_api_is_transient(fake: FakeTwilio) -> None:
    adapter = WhatsAppChannel(WhatsAppConfig(**whatsapp_entry(fake, api_base_url="http://127.0.0.1:9", request_timeout=2)))
    with pytest.raises(TransientChannelError) as caught:
        await adapter.probe()
    assert not isinstance(caught.value, UncertainDeliveryError)
    assert "could not reach the Twilio API" in caught.value.hint


# --------------------------------------------------------------------------- probe and config


async def test_probe_fetches_the_account_and_a_bad_token_is_an_auth_error(fake: FakeTwilio, tmp_path: Path) -> None:
    good = WhatsAppChannel(WhatsAppConfig(**whatsapp_entry(fake)))
    assert await good.probe() == "Twilio account 'Acme Support' (active), sending from whatsapp:+14155238886 to 2 numbers"
    assert fake.calls[-1].method == "GET"
    assert fake.calls[-1].path == f"/2010-04-01/Accounts/{ACCOUNT_SID}.json"
    wrong = "9" * 32
    bad = WhatsAppChannel(WhatsAppConfig(**whatsapp_entry(fake, auth_token=wrong)))
    with pytest.raises(ChannelAuthError) as caught:
        await bad.probe()
    assert "account_sid/auth_token" in caught.value.hint
    assert wrong not in caught.value.hint + str(caught.value)

    async def check_config(token: str) -> tuple[int, str]:
        path = tmp_path / "desk.yaml"
        path.write_text("secret_key: 0123456789abcdef0123\nchannels:\n"
                        f"  - {{id: 1, kind: whatsapp, label: On-call, account_sid: {ACCOUNT_SID}, auth_token: '{token}', "
                        f"from: 'whatsapp:+14155238886', to: '{ANA_PHONE}', api_base_url: '{fake.base_url}'}}\n")
        run = await probe_config(path)
        return run.code, run.out + run.err

    code, output = await check_config(wrong)
    assert code == 1, output
    assert "channels[0] (whatsapp 'On-call'): FAILED, Twilio refused account_sid/auth_token" in output, output
    assert wrong not in output
    assert AUTH_TOKEN not in output
    code, output = await check_config(AUTH_TOKEN)
    assert code == 0, output
    assert "channels[0] (whatsapp 'On-call'): ok, Twilio account 'Acme Support' (active)" in output, output


@pytest.mark.parametrize(("entry", "problem"), [
    ({"account_sid": "SK123"}, "channels[0].account_sid: must be the Account SID"),
    ({"auth_token": " "}, "channels[0].auth_token: required"),
    ({"from": "14155238886"}, "channels[0].from: '14155238886' is not a phone number in E.164 form"),
    ({"to": ["+34600111222", "whatsapp:+34 600 111 222"]}, "channels[0].to: lists the same number twice"),
    ({"to": ["+0123"]}, "channels[0].to: '+0123' is not a phone number in E.164 form"),
    ({"to": []}, "channels[0].to: List should have at least 1 item"),
    ({"content_sid": "MG123"}, "channels[0].content_sid: must be a Content SID"),
    ({"content_variables": {"1": "summry"}}, "channels[0].content_variables.1: Input should be 'summary'"),
    ({"api_base_url": "api.twilio.com"}, "channels[0].api_base_url: must be an http(s) URL"),
    ({"auth_tokn": "x"}, "channels[0].auth_tokn: unknown key; did you mean 'auth_token'?"),
])
def test_config_problems_are_named_by_key_path_without_echoing_secrets(entry: dict[str, Any], problem: str) -> None:

    channel = {"id": 1, "kind": "whatsapp", "label": "WA", "account_sid": ACCOUNT_SID, "auth_token": "SECRET-value",
               "from": "+14155238886", "to": [ANA_PHONE], **entry}
    text = config_problem(channels=[channel])
    assert problem in text, text
    assert "SECRET-value" not in text


def test_numbers_are_normalised_and_defaults_documented() -> None:
    config = make_config("sqlite:///x.db", channels=[
        {"id": 6, "kind": "whatsapp", "label": "On-call", "account_sid": ACCOUNT_SID, "auth_token": AUTH_TOKEN,
         "from_number": "whatsapp:+1 (415) 523-8886", "to": "+34 600 111 222, whatsapp:+447700900123"},
    ])
    [channel] = config.channels
    assert (channel.from_number, channel.to) == (SENDER, [ANA_PHONE, BEN_PHONE])
    assert (channel.content_sid, channel.content_variables, channel.status_callback, channel.api_base_url) == (
        None, {"1": "summary", "2": "expected_action", "3": "link"}, False, "https://api.twilio.com")


# --------------------------------------------------------------------------- the whole story


async def test_the_whole_story_through_the_http_api(fake: FakeTwilio, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation("Ana")
    await harness.say(cid, "My parcel 1234 is lost")
    sid, told = await harness.ask_for_a_person(cid)
    assert told.startswith("I've asked our team to join")
    code = (await harness.handoff(sid))["short_code"]
    dispatch = bodies(fake, ANA_PHONE)[-1]
    assert f"*Handoff #{code}*" in dispatch
    assert "Ana: My parcel 1234 is lost" in dispatch

    assert (await harness.say(cid, "Are you there?"))["routed_to"] == "human"
    await harness.desk.settle()
    assert bodies(fake, ANA_PHONE)[-1] == bodies(fake, BEN_PHONE)[-1] == f"#{code} *Ana*: Are you there?"

    await reply(harness, fake, "Hi Ana, I'm Sam. Found it at the depot.")
    assert (await harness.messages(cid))[-1]["text"] == "Hi Ana, I'm Sam. Found it at the depot."
    await reply(harness, fake, "/release resolved Parcel re-routed")
    resumed = next(m for m in await harness.messages(cid) if m["role"] == "system")
    assert resumed["text"].startswith("[Bot resumed — ")
    assert "Outcome: resolved" in resumed["text"]
    handoff = await harness.handoff(sid)
    assert (handoff["state"], handoff["release_reason"], handoff["released_by"]) == ("released", "release_token", "Sam")
    notice = f"Handoff {code} released (resolved); the assistant has taken the conversation back."
    assert bodies(fake, ANA_PHONE)[-1] == bodies(fake, BEN_PHONE)[-1] == notice
    assert (await harness.say(cid, "Thanks!"))["routed_to"] == "agent"


# --------------------------------------------------------------------------- approvals

APPROVAL_SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                   "required": ["order_id", "amount"]}


def refund_action(**overrides: Any) -> dict[str, Any]:
    return shared_refund_action(1, **{"description": "Refund an order to the *original* payment method", "input_schema": APPROVAL_SCHEMA, **overrides})


async def approval_desk(start_desk: StartDesk, fake: FakeTwilio, *actions: dict[str, Any]) -> Harness:
    from tests import approval_actions

    approval_actions.CALLS.clear()
    return await start(start_desk, fake, actions=list(actions) or [refund_action()])


def decision_path(body: str) -> str:
    import re

    [url] = re.findall(r"http://desk\.test/a/[A-Za-z0-9_.\-]+", body)
    return url.removeprefix("http://desk.test")


async def decide_on_page(harness: Harness, path: str, decision: str, **form: str) -> httpx.Response:
    return await harness.client.post(path, data={"token": path.rsplit("/", 1)[1], "decision": decision, **form})


def shown_arguments(body: str) -> str:
    return body.split("```\n", 1)[1].split("\n```", 1)[0]


async def test_an_approval_prompt_reaches_every_number_with_exact_arguments_and_the_link(
    fake: FakeTwilio, start_desk: StartDesk,
) -> None:
    harness = await approval_desk(start_desk, fake)
    cid = await harness.conversation(name="Ana *VIP*")
    arguments = {"order_id": "*1234* _now_ ```x``` ~no~", "amount": 25.5}
    await harness.ask_approval(cid, **arguments)
    [to_ana], [to_ben] = fake.sent_to(ANA_PHONE), fake.sent_to(BEN_PHONE)
    body = to_ana["body"]
    assert body == to_ben["body"]
    assert utf16_len(body) <= BODY_LIMIT
    assert body.startswith("🔴 *HIGH RISK* · *Approval needed*: may the assistant run refund_order for Ana ∗VIP∗?\n")
    assert "Refund an order to the ∗original∗ payment method" in body
    assert "*Risk:* high" in body
    # inside the monospace block nothing formats; the block cannot be closed early, and the JSON is exact
    block = shown_arguments(body)
    assert "`" not in block
    assert json.loads(block) == arguments
    assert '"order_id": "*1234* _now_ \\u0060\\u0060\\u0060x\\u0060\\u0060\\u0060 ~no~"' in block
    assert "no answer by " in body
    assert body.endswith("A reply in this chat is not a decision.")
    assert (await harness.client.get(decision_path(body))).status_code == 200


async def test_approving_on_the_page_runs_the_action_and_every_number_hears_how_it_ended(
    fake: FakeTwilio, start_desk: StartDesk,
) -> None:
    from tests import approval_actions

    harness = await approval_desk(start_desk, fake)
    cid = await harness.conversation()
    aid = await harness.ask_approval(cid, order_id="1234", amount=25.5)
    path = decision_path(bodies(fake, ANA_PHONE)[-1])
    assert (await decide_on_page(harness, path, "approve", name="Kim")).status_code == 200
    await harness.desk.settle()
    assert approval_actions.CALLS == [{"order_id": "1234", "amount": 25.5}]
    system = [m["text"] for m in await harness.messages(cid) if m["role"] == "system"]
    assert system[0].startswith("[Approval — refund_order was approved and ran")
    closing = f"*Approval closed* · Approved by Kim (decision link): refund_order ({aid}) will run."
    assert bodies(fake, ANA_PHONE)[-1] == bodies(fake, BEN_PHONE)[-1] == closing
    # a replayed or forged press changes nothing
    assert (await decide_on_page(harness, path, "deny")).status_code == 410
    assert (await decide_on_page(harness, path[:-4] + "abcd", "deny")).status_code == 404
    assert len(approval_actions.CALLS) == 1
    assert len(fake.sent_to(ANA_PHONE)) == 2


async def test_denying_on_the_page_is_permission_denied(fake: FakeTwilio, start_desk: StartDesk) -> None:
    from tests import approval_actions

    harness = await approval_desk(start_desk, fake)
    cid = await harness.conversation()
    await harness.ask_approval(cid, order_id="1234", amount=900)
    await decide_on_page(harness, decision_path(bodies(fake, ANA_PHONE)[-1]), "deny", reason="Over the *limit*")
    await harness.desk.settle()
    assert approval_actions.CALLS == []
    system = [m["text"] for m in await harness.messages(cid) if m["role"] == "system"]
    assert system == ["[Approval — refund_order: PERMISSION_DENIED. A person denied it: Over the *limit*. The action did not "
                      "run; do not try to reach the same result another way.]"]
    assert bodies(fake, BEN_PHONE)[-1].startswith("*Approval closed* · Denied by decision link holder: refund_order")


async def test_replies_on_the_line_still_go_to_handoffs_never_to_a_pending_approval(fake: FakeTwilio, start_desk: StartDesk) -> None:
    from tests import approval_actions

    harness = await approval_desk(start_desk, fake)
    cid = await harness.conversation()
    aid = await harness.ask_approval(cid, order_id="1234", amount=5)
    await reply(harness, fake, "approve")  # no open handoff: answered by the line, decides nothing
    other = await harness.conversation("Ben", email=None)
    _sid, _code = await dispatched(harness, other)
    await reply(harness, fake, "yes, approve it", profile_name="Sam")
    assert await harness.human_texts(other) == [("Sam", "yes, approve it")]
    assert await harness.human_texts(cid) == []
    assert approval_actions.CALLS == []
    assert (await harness.client.get(f"/api/approvals/{aid}")).json()["state"] == "pending"


async def test_a_two_person_prompt_says_so_in_one_line_and_a_one_person_prompt_does_not(fake: FakeTwilio) -> None:
    adapter = WhatsAppChannel(WhatsAppConfig(**whatsapp_entry(fake, to=[ANA_PHONE])))
    await adapter.start(ChannelContext(public_url="http://desk.test", deliver_inbound=_drop, render=Renderer().render))
    try:
        await adapter.send(ApprovalPrompt(text="…", approval=refund_brief("ap_1", subscriber_name="*Ana*")))
        await adapter.send(ApprovalPrompt(text="…", approval=refund_brief("ap_1", subscriber_name="*Ana*", approvals_required=2)))
    finally:
        await adapter.stop()
    one, two = bodies(fake, ANA_PHONE)
    line = f"{defuse(TWO_PEOPLE)}\n"
    assert f"\n*Risk:* high\n{line}*Exactly these arguments:*\n" in two
    assert two.replace(line, "", 1) == one
    assert "two people" not in one


async def test_huge_arguments_are_cut_visibly_and_the_link_is_kept(fake: FakeTwilio) -> None:
    from channels.base import ApprovalBrief

    adapter = WhatsAppChannel(WhatsAppConfig(**whatsapp_entry(fake, to=[ANA_PHONE])))
    await adapter.start(ChannelContext(public_url="http://desk.test", deliver_inbound=_drop, render=Renderer().render))
    try:
        brief = ApprovalBrief(approval_id="ap_big", action_id="import_rows", description="Import rows " * 100, risk="low",
                              arguments={"rows": [f"row {i}" for i in range(500)]}, conversation_id="c1",
                              decision_url="http://desk.test/a/" + "t" * 80, allow_always=True, expires_at="2026-03-14T10:05:00")
        await adapter.send(ApprovalPrompt(text="…", approval=brief))
        closed = "Nobody answered in time: *import_rows* (ap_-big_) was denied and will not run."
        await adapter.send(ApprovalClosed(text=closed, approval=refund_brief("ap_-big_")))
        with pytest.raises(ValidationError):  # a prompt without its brief cannot even be built
            ApprovalPrompt.model_validate({"text": "…"})
    finally:
        await adapter.stop()
    prompt, closing = bodies(fake, ANA_PHONE)
    assert utf16_len(prompt) <= BODY_LIMIT
    assert prompt.startswith("*Approval needed*: may the assistant run import_rows?")
    assert "more characters on the page\n```" in prompt
    assert "no answer by 14 Mar, 10:05 UTC means denied" in prompt
    assert "http://desk.test/a/" + "t" * 80 + "\n" in prompt
    assert shown_arguments(prompt).startswith('{\n  "rows": [\n    "row 0",')
    assert closing == "*Approval closed* · Nobody answered in time: ∗import_rows∗ (ap_-big_) was denied and will not run."


# --------------------------------------------------------------------------- helpers


async def _drop(_message: InboundMessage) -> None:
    return None


def _brief(code: str) -> HandoffBrief:
    return HandoffBrief(handoff_session_id=f"hs_{code}0000", short_code=code.upper(), conversation_id="c1", subscriber_name="Ana",
                        summary="Ana's order #1234 is a week late.", expected_action="Check the carrier.",
                        transcript=[TranscriptLine(role="subscriber", author="Ana", text="hello", at="2026-01-01T00:00:00Z")])


async def test_a_dispatch_outside_office_hours_says_so_under_its_title(fake: FakeTwilio, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake, channel={"hours": "mondays"}, hours=CLOSED_HOURS, clock=closed_clock())
    await dispatched(harness, await harness.conversation())
    assert fake.sent_to(ANA_PHONE)[0]["body"].splitlines()[1] == OUTSIDE_HOURS_LINE


async def test_a_subscriber_on_the_front_is_named_by_their_number(fake: FakeTwilio) -> None:
    adapter = WhatsAppChannel(WhatsAppConfig(**whatsapp_entry(fake)))
    await adapter.start(ChannelContext(public_url="https://desk.example.com", deliver_inbound=_drop, render=Renderer().render,
                                       subscribers=True))
    try:
        url = "https://desk.example.com/webhooks/1"
        body, headers = fake.inbound(url, body="Where is my order?", sender=CARLA_PHONE, profile_name="Carla")
        reply_ = await adapter.handle_webhook(WebhookRequest(body=body, headers={k.lower(): v for k, v in headers.items()},
                                                             query={}, url=url))
    finally:
        await adapter.stop()
    [message] = reply_.messages
    assert isinstance(message, SubscriberText)
    assert (message.chat, message.user_id, message.author) == (CARLA_PHONE, CARLA_PHONE, "Carla")
