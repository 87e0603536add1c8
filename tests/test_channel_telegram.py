"""The Telegram channel: the real python-telegram-bot against a fake Bot API on 127.0.0.1.

Everything of ours runs for real (desk, outbox, inbound, HTTP API, webhook route); only
Telegram is played by tests/fake_telegram.py, which is as strict as Telegram about HTML,
message length, buttons and pollers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import json
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from bot.domain.rendering import Renderer
from channels.base import (
    ApprovalClosed,
    ApprovalPrompt,
    ChannelAuthError,
    ChannelContext,
    ChatOpened,
    ClaimPress,
    Decision,
    InboundMessage,
    Notice,
    Receipt,
    RecipientText,
    Relay,
    ReleasePress,
    SubscriberText,
    TransientChannelError,
    UncertainDeliveryError,
    WebhookReply,
    WebhookRequest,
)
from channels.telegram import MESSAGE_LIMIT, TelegramChannel, TelegramConfig
from tests.approval_actions import TWO_PEOPLE, refund_brief
from tests.approval_actions import refund_action as shared_refund_action
from tests.conftest import CliRun, Harness, StartDesk, config_problem, make_config, probe_config
from tests.fake_telegram import ANA, BOT_USER, KIM, OTHER_BOT, SAM, STAFF_CHAT_ID, FakeTelegram, utf16_len
from tests.fakes import standalone_context
from tests.office_hours import CLOSED_HOURS, OUTSIDE_HOURS_LINE, closed_clock
from tests.route_dispatches import route_dispatch

TOKEN = "123456:TEST-token_abcdefghijklmnop"
SECRET = "test_webhook-secret-1"
HOSTILE = "Ana wrote <b>free</b> & _*[]`~ <script>alert(1)</script> &amp; <a href=x>x</a> about order #1234"


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    """The channel's behaviour does not depend on the database: SQLite only."""
    return sqlite_url


@pytest.fixture
async def fake() -> Any:
    """Requested before start_desk in each test, so it outlives the desk (a poller never sees it vanish)."""
    server = await FakeTelegram(token=TOKEN).start()
    yield server
    await server.stop()


@pytest.fixture
async def forum() -> Any:
    """A staff group that is a forum (topics)."""
    server = await FakeTelegram(token=TOKEN, is_forum=True).start()
    yield server
    await server.stop()


def telegram_channel(fake: FakeTelegram, **overrides: Any) -> dict[str, Any]:
    return {"id": 1, "kind": "telegram", "label": "Support (Telegram)", "bot_token": TOKEN, "chat_id": STAFF_CHAT_ID,
            "api_base_url": fake.base_url, "webhook_secret": SECRET, "estimated_response": "within the hour", **overrides}


async def start(start_desk: StartDesk, fake: FakeTelegram, *, channel: dict[str, Any] | None = None, **overrides: Any) -> Harness:
    return await start_desk(channels=[{**telegram_channel(fake), **(channel or {})}], **overrides)


async def post(harness: Harness, update: dict[str, Any], secret: str | None = SECRET) -> httpx.Response:
    headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret is not None else {}
    return await harness.client.post("/webhooks/1", json=update, headers=headers)


async def deliver(harness: Harness, update: dict[str, Any]) -> None:
    """A webhook call from Telegram, then the relaying the desk does after answering it."""
    response = await post(harness, update)
    assert response.status_code == 200, response.text
    await harness.desk.settle()




def buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for row in message.get("reply_markup", {}).get("inline_keyboard", []) for b in row]


async def dispatch_of(harness: Harness, fake: FakeTelegram, cid: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    result = await harness.start_handoff(cid, channel_id=1, **fields)
    message = fake.sent()[-1]
    assert result["channel_message_id"] == str(message["message_id"])
    return result["handoff_session_id"], message


# --------------------------------------------------------------------------- dispatch


async def test_the_dispatch_is_escaped_html_with_a_form_button_and_a_release_button(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation(name="Ana <Admin>")
    await harness.say(cid, "My order <b>1234</b> & co never came")
    sid, message = await dispatch_of(
        harness, fake, cid, urgency="high", summary=HOSTILE, expected_action="Check <carrier> & tell _Ana_ the ETA.",
        extra_context={"plan": "<pro> & *gold*"},
        expected_return=[{"name": "eta_date", "type": "date", "required": True, "label": "ETA"},
                         {"name": "status", "type": "enum", "enum_values": ["shipped", "<lost>"]}],
    )
    request = fake.requests("sendMessage")[0]
    assert request["parse_mode"] == "HTML"
    assert request["link_preview_options"] == {"is_disabled": True}
    assert "&lt;script&gt;" in request["text"]
    assert "<script>" not in request["text"]
    text = message["text"]  # what people see: Telegram parsed the HTML and accepted it
    assert text.startswith("🔴 URGENT · Handoff ")
    assert "Ana <Admin> needs a person" in text
    assert f"Summary\n{HOSTILE}\n" in text
    assert "What to do\nCheck <carrier> & tell _Ana_ the ETA." in text
    assert "Contact back: ana@example.com" in text
    assert "• plan: <pro> & *gold*" in text
    assert "• ETA [date, YYYY-MM-DD] (required)" in text
    assert "• Status [one of: shipped, <lost>]" in text
    assert "Ana <Admin>: My order <b>1234</b> & co never came" in text
    assert "Reply to this message" in text
    assert "/release" in text
    form_url = (await harness.handoff(sid))["form_url"]
    assert buttons(message) == [{"text": "Return form", "url": form_url}, {"text": "Release", "callback_data": "release"}]
    assert f'<a href="{form_url}">return form</a>' in request["text"]


async def test_user_text_can_neither_mention_staff_nor_offer_a_command(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation(name="@ana")
    await dispatch_of(harness, fake, cid, summary="Please ping @staff_lead now and /release this handoff")
    dispatch = fake.requests("sendMessage")[-1]["text"]
    assert "@\u2060staff_lead" in dispatch
    assert "/\u2060release this handoff" in dispatch
    assert "@staff_lead" not in dispatch  # Telegram would notify that member
    await harness.say(cid, "hey @staff_lead, tap /release — mail me at ana@example.com or see https://x.example/a/b")
    await harness.desk.settle()
    relay = fake.requests("sendMessage")[-1]["text"]
    assert "@\u2060staff_lead" in relay
    assert "/\u2060release" in relay
    assert "ana@example.com" in relay
    assert "https://x.example/a/b" in relay  # addresses and links untouched


async def test_a_long_transcript_keeps_the_newest_lines_and_says_how_many_were_left_out(
    fake: FakeTelegram, start_desk: StartDesk,
) -> None:
    harness = await start(start_desk, fake, handoff={"transcript_messages": 60})
    cid = await harness.conversation()
    for i in range(25):
        await harness.say(cid, f"message {i:02d}: " + "my parcel is still missing, " * 12)
    history = [m for m in await harness.messages(cid) if m["role"] != "system"][-60:]
    _sid, message = await dispatch_of(harness, fake, cid)
    text = message["text"]
    assert utf16_len(text) <= MESSAGE_LIMIT
    left_out = int(re.search(r"\((\d+) earlier messages left out\)", text).group(1))
    shown = len(history) - left_out
    assert 0 < shown < len(history)
    assert history[-1]["text"] in text
    assert "message 24:" in text  # the newest line is there
    assert history[-shown]["text"] in text  # the oldest line shown is right after the ones left out
    assert "message 00:" not in text


async def test_a_brief_at_every_maximum_still_fits_one_message(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation()
    fields = [{"name": f"field_{i}", "type": "enum", "enum_values": [f"<value {j}> & more" for j in range(20)],
               "description": "d&" * 200, "label": "L" * 100} for i in range(20)]
    _sid, message = await dispatch_of(
        harness, fake, cid, summary="&<>" * 666, expected_action="<" * 1000,
        extra_context={f"key{i}": "&" * 180 for i in range(18)}, expected_return=fields,
    )
    assert utf16_len(message["text"]) <= MESSAGE_LIMIT
    assert "Parts of this brief were shortened to fit one Telegram message." in message["text"]
    assert "more on the return form" in message["text"]


# --------------------------------------------------------------------------- both directions


async def test_two_handoffs_in_one_group_never_cross(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    ana, ben = await harness.conversation("Ana"), await harness.conversation("Ben", email=None)
    _sid_a, dispatch_a = await dispatch_of(harness, fake, ana)
    _sid_b, dispatch_b = await dispatch_of(harness, fake, ben)
    await harness.say(ben, "Ben here, still waiting")
    await harness.say(ana, "Ana here: <i>any</i> news & updates?")
    await harness.desk.settle()
    relay_b, relay_a = fake.sent()[-2:]
    # relays are replies to their own dispatch, labelled in bold, escaped, with a Release button naming it
    assert relay_a["text"] == "Ana: Ana here: <i>any</i> news & updates?"
    assert fake.requests("sendMessage")[-1]["text"] == "<b>Ana</b>: Ana here: &lt;i&gt;any&lt;/i&gt; news &amp; updates?"
    assert relay_a["reply_to_message"]["message_id"] == dispatch_a["message_id"]
    assert relay_b["reply_to_message"]["message_id"] == dispatch_b["message_id"]
    assert buttons(relay_a) == [{"text": "Release", "callback_data": f"release:{dispatch_a['message_id']}"}]

    await deliver(harness, fake.message_update("For Ana: it ships Monday.", reply_to=dispatch_a["message_id"], user=SAM))
    # Telegram shows only one level of the reply chain: a reply to Ben's relay maps back through its button
    await deliver(harness, fake.message_update("For Ben: refund done.", reply_to=relay_b["message_id"], user=KIM))
    await deliver(harness, fake.message_update("Ana, one more thing.", reply_to=relay_a["message_id"], user=KIM))
    assert await harness.human_texts(ana) == [("Sam Lee", "For Ana: it ships Monday."), ("Kim", "Ana, one more thing.")]
    assert await harness.human_texts(ben) == [("Kim", "For Ben: refund done.")]


async def test_a_reply_in_the_group_reaches_the_subscriber_as_a_human_message(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation()
    sid, dispatch = await dispatch_of(harness, fake, cid)
    await deliver(harness, fake.message_update("Hi Ana <3, I'm on it & checking.", reply_to=dispatch["message_id"]))
    human = (await harness.messages(cid))[-1]
    assert (human["role"], human["author"], human["text"], human["handoff_session_id"]) == (
        "human", "Sam Lee", "Hi Ana <3, I'm on it & checking.", sid)
    assert "relayed_to_subscriber" in await harness.kinds(sid)
    # an admin posting anonymously speaks as the group (through Telegram's GroupAnonymousBot)
    anonymous = {"id": 1087968824, "is_bot": True, "first_name": "Group", "username": "GroupAnonymousBot"}
    await deliver(harness, fake.message_update("Checked with the carrier.", reply_to=dispatch["message_id"], user=anonymous,
                                               sender_chat=fake.chat, author_signature="Dana"))
    assert (await harness.messages(cid))[-1]["author"] == "Dana"


async def test_a_relay_longer_than_one_telegram_message_arrives_in_parts(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation()
    _sid, dispatch = await dispatch_of(harness, fake, cid)
    long_text = " ".join(f"w{i:04d} & <more>" for i in range(600))  # 8,999 characters: three messages
    await harness.say(cid, long_text)
    await harness.desk.settle()
    parts = fake.sent()[-3:]
    assert [p["text"].split(": ", 1)[0] for p in parts] == ["Ana (1/3)", "Ana (2/3)", "Ana (3/3)"]
    assert " ".join(p["text"].split(": ", 1)[1] for p in parts) == long_text
    assert all(p["reply_to_message"]["message_id"] == dispatch["message_id"] for p in parts)


async def test_release_typed_in_the_thread_releases_with_the_release_token(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation()
    sid, dispatch = await dispatch_of(harness, fake, cid)
    await harness.say(cid, "Hello?")
    await harness.desk.settle()
    relay = fake.sent()[-1]
    await deliver(harness, fake.message_update("/release@handoff_desk_bot resolved Re-shipped today", reply_to=relay["message_id"]))
    handoff = await harness.handoff(sid)
    assert (handoff["state"], handoff["release_reason"], handoff["outcome"], handoff["note"], handoff["released_by"]) == (
        "released", "release_token", "resolved", "Re-shipped today", "Sam Lee")
    assert any(m["role"] == "system" and m["text"].startswith("[Bot resumed") for m in await harness.messages(cid))
    notice = fake.sent()[-1]
    assert notice["text"] == f"Handoff {handoff['short_code']} released (resolved); the assistant has taken the conversation back."
    assert notice["reply_to_message"]["message_id"] == dispatch["message_id"]
    assert buttons(notice) == []


async def test_the_release_button_releases_and_the_click_is_answered(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    ana, ben = await harness.conversation("Ana"), await harness.conversation("Ben", email=None)
    sid_a, dispatch_a = await dispatch_of(harness, fake, ana)
    sid_b, _dispatch_b = await dispatch_of(harness, fake, ben)
    await harness.say(ben, "Ben again")
    await harness.desk.settle()
    relay_b = fake.sent()[-1]

    click = fake.callback_update(dispatch_a["message_id"], user=KIM)
    response = await post(harness, click)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"method": "answerCallbackQuery", "callback_query_id": click["callback_query"]["id"],
                               "text": "Releasing the handoff…"}
    await harness.desk.settle()
    await deliver(harness, fake.callback_update(relay_b["message_id"], user=SAM))  # Release under a relay: its handoff
    first, second = await harness.handoff(sid_a), await harness.handoff(sid_b)
    assert (first["state"], first["release_reason"], first["released_by"]) == ("released", "release_token", "Kim")
    assert (second["state"], second["release_reason"], second["released_by"]) == ("released", "release_token", "Sam Lee")


# --------------------------------------------------------------------------- what is refused or ignored


async def test_a_wrong_or_missing_secret_token_gets_403_and_nothing_is_stored(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation()
    _sid, dispatch = await dispatch_of(harness, fake, cid)
    update = fake.message_update("forged", reply_to=dispatch["message_id"])
    for secret in ("wrong-secret", "", None, SECRET + "x"):
        response = await post(harness, update, secret=secret)
        assert response.status_code == 403
    for body in ({"not": "an update"}, [update]):
        refused = await post(harness, body)  # right secret, but not an update: the usual error body
        assert (refused.status_code, refused.json()["error"]) == (400, "invalid_json"), body
    malformed = await harness.client.post("/webhooks/1", content=b"{not json", headers={
        "X-Telegram-Bot-Api-Secret-Token": SECRET, "content-type": "application/json"})
    assert (malformed.status_code, malformed.json()["error"]) == (400, "invalid_json")
    untyped = await post(harness, None)  # no body and no Content-Type: not a call Telegram makes
    assert (untyped.status_code, untyped.json()["error"]) == (415, "unsupported_media_type")
    await harness.desk.settle()
    assert await harness.stored_events() == 0
    assert await harness.human_texts(cid) == []


async def test_bots_other_chats_service_messages_and_side_talk_are_not_relayed(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation()
    sid, dispatch = await dispatch_of(harness, fake, cid)
    mid = dispatch["message_id"]
    colleague = fake.message_update("Kim, can you take this one?")
    other_chat = {"id": -100999, "type": "supergroup", "title": "Elsewhere"}
    for update in (
        fake.message_update("echo of ourselves", reply_to=mid, user=BOT_USER),
        fake.message_update("another bot talking", reply_to=mid, user=OTHER_BOT),
        fake.message_update("wrong group", reply_to=mid, chat=other_chat),
        fake.message_update(None, reply_to=mid, new_chat_members=[KIM]),  # a service message
        colleague,  # not a reply to us
        fake.message_update("Sure, on it.", reply_to=colleague["message"]["message_id"], user=KIM),  # a reply to a colleague
        fake.message_update("/release@other_bot", reply_to=mid),  # a command for another bot
        fake.callback_update(mid, user=OTHER_BOT),
    ):
        await deliver(harness, update)
    assert await harness.stored_events() == 0
    assert await harness.human_texts(cid) == []
    assert (await harness.handoff(sid))["state"] == "active"


# --------------------------------------------------------------------------- provider failures


async def test_a_dispatch_survives_a_telegram_5xx(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake, delivery={"base_backoff": "1ms"})
    fake.fail("sendMessage", 502, "Bad Gateway")
    cid = await harness.conversation()
    sid, _dispatch = await dispatch_of(harness, fake, cid)
    assert len(fake.requests("sendMessage")) == 2
    assert len(fake.sent()) == 1
    assert "delivery_retry_scheduled" in await harness.kinds(sid)


@pytest.mark.parametrize(("status", "description", "hint"), [
    (400, "Bad Request: chat not found", "Telegram refused the request: Chat not found"),
    (403, "Forbidden: bot was kicked from the supergroup chat", "Telegram refused (Forbidden: bot was kicked from the supergroup chat)"),
    (400, "Bad Request: group chat was upgraded to a supergroup chat", "set chat_id: -1009876543210"),
])
async def test_a_refused_dispatch_fails_at_once_with_telegrams_reason(
    fake: FakeTelegram, start_desk: StartDesk, status: int, description: str, hint: str,
) -> None:
    harness = await start(start_desk, fake, delivery={"base_backoff": "1ms"})
    fake.fail("sendMessage", status, description, **({"migrate_to_chat_id": -1009876543210} if "upgraded" in description else {}))
    cid = await harness.conversation()
    result = await harness.tool(cid, "handoff_request", {
        "channel_id": 1, "summary": "Ana's order #1234 is a week late.", "expected_action": "Check the carrier."})
    assert result["error"] == "dispatch_failed"
    assert result["details"]["attempts"] == 1
    assert hint in result["details"]["hint"]
    assert TOKEN not in str(result)
    assert (await harness.handoff(result["details"]["handoff_session_id"]))["state"] == "failed"


async def test_a_timeout_after_sending_is_an_uncertain_delivery(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake, channel={"request_timeout": 1.0})  # long enough to reach the fake on a busy machine
    cid = await harness.conversation()
    sid, dispatch = await dispatch_of(harness, fake, cid)
    adapter = harness.desk.channels.get(1)
    handoff = await harness.desk.handoffs.get(sid)
    fake.hold("sendMessage")  # Telegram got it but never answers
    with pytest.raises(UncertainDeliveryError) as caught:
        await adapter.send(Relay(handoff_id=sid, text="Ana: hi", author="Ana", body="hi",
                                    thread=handoff.thread))
    fake.release()
    assert fake.requests("sendMessage")[-1]["text"] == "<b>Ana</b>: hi"  # the request did reach the provider
    assert "may have been posted" in caught.value.hint
    assert adapter.capabilities.reconcile is False  # the Bot API cannot look a sent message up
    assert handoff.thread == {"chat_id": STAFF_CHAT_ID, "message_id": dispatch["message_id"], "topic_id": None}


async def test_an_unreachable_api_is_transient() -> None:
    config = TelegramConfig(id=1, label="TG", bot_token=TOKEN, chat_id=STAFF_CHAT_ID, api_base_url="http://127.0.0.1:9/bot",
                            request_timeout=2)
    adapter = TelegramChannel(config)
    try:
        with pytest.raises(TransientChannelError) as caught:
            await adapter.probe()
    finally:
        await adapter.stop()
    assert not isinstance(caught.value, UncertainDeliveryError)
    assert caught.value.hint == "could not connect to Telegram"


async def test_a_bad_token_fails_the_probe_and_check_config_says_so(fake: FakeTelegram, tmp_path: Path) -> None:
    wrong = "123456:WRONG-token_zyxwvutsrqponm"
    adapter = TelegramChannel(TelegramConfig(id=1, label="TG", bot_token=wrong, chat_id=STAFF_CHAT_ID, api_base_url=fake.base_url))
    try:
        with pytest.raises(ChannelAuthError) as caught:
            await adapter.probe()
    finally:
        await adapter.stop()
    assert "@BotFather" in caught.value.hint
    assert "WRONG-token" not in caught.value.hint + str(caught.value)

    async def check_config(token: str) -> CliRun:
        path = tmp_path / "desk.yaml"
        path.write_text("secret_key: 0123456789abcdef0123\nchannels:\n"
                        f"  - {{id: 1, kind: telegram, label: Support, bot_token: '{token}', chat_id: {STAFF_CHAT_ID}, "
                        f"api_base_url: '{fake.base_url}'}}\n")
        return await probe_config(path)

    code, out, err = await check_config(wrong)
    assert code == 1, out + err
    assert "channels[0] (telegram 'Support'): FAILED, Telegram refused bot_token (401/404)" in err
    assert "WRONG-token" not in out + err
    code, out, err = await check_config(TOKEN)
    assert code == 0, out + err
    assert "channels[0] (telegram 'Support'): ok, @handoff_desk_bot, posting to 'Support staff'" in out


async def test_a_group_the_bot_cannot_see_makes_the_channel_unavailable(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake, channel={"chat_id": -100555})
    [state] = (await harness.client.get("/healthz")).json()["channels"]
    assert state["available"] is False
    assert state["problem"] == ("Telegram refused the request: Chat not found; "
                                "check chat_id (-100555) and that the bot is a member of that group")


# --------------------------------------------------------------------------- webhook registration


async def test_the_webhook_is_registered_with_a_secret_derived_from_the_token(fake: FakeTelegram, start_desk: StartDesk) -> None:
    server = {"public_url": "https://desk.example.com", "allowed_hosts": ["desk.test"]}
    harness = await start(start_desk, fake, channel={"webhook_secret": None}, server=server)
    derived = hmac.new(TOKEN.encode(), b"handoff-desk telegram webhook secret", hashlib.sha256).hexdigest()
    [registration] = fake.requests("setWebhook")
    assert registration == {"url": "https://desk.example.com/webhooks/1", "secret_token": derived,
                            "allowed_updates": ["message", "callback_query"]}
    # a restart (a new adapter from the same config) expects the same secret; another token does not
    config = harness.desk.config.channel(1)
    assert TelegramChannel(config).webhook_secret == derived
    assert TelegramChannel(config.model_copy(update={"bot_token": SecretStr("654321:other")})).webhook_secret != derived
    update = fake.message_update("hello")
    assert (await post(harness, update, secret=derived)).status_code == 200
    assert (await post(harness, update, secret=SECRET)).status_code == 403


@pytest.mark.parametrize("public_url", ["http://desk.test", "https://127.0.0.1:8443", "https://localhost", "https://desk.example.com:8000"])
async def test_no_webhook_is_registered_where_telegram_cannot_call(fake: FakeTelegram, start_desk: StartDesk, public_url: str) -> None:
    harness = await start(start_desk, fake, server={"public_url": public_url})
    assert fake.requests("setWebhook") == []
    assert harness.desk.channels.is_available(1)  # it still sends


# --------------------------------------------------------------------------- polling


async def test_polling_receives_replies_and_button_clicks_and_stops_cleanly(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake, channel={"mode": "polling", "poll_timeout": 5})
    cid = await harness.conversation()
    sid, dispatch = await dispatch_of(harness, fake, cid)
    after = max([0] + [m["id"] for m in await harness.messages(cid)])
    reply = await fake.queue(fake.message_update("Polled reply: on it.", reply_to=dispatch["message_id"]))
    response = await harness.client.get(f"/api/conversations/{cid}/messages", params={"after": after, "wait": 10})
    assert [(m["role"], m["text"]) for m in response.json()["messages"]] == [("human", "Polled reply: on it.")]
    # the next poll confirms the update (offset), so Telegram forgets it
    await fake.wait_for(lambda: any(r.get("offset") == reply["update_id"] + 1 for r in fake.requests("getUpdates")))

    click = await fake.queue(fake.callback_update(dispatch["message_id"]))
    await fake.wait_for(lambda: bool(fake.requests("answerCallbackQuery")))
    await harness.desk.settle()
    assert fake.requests("answerCallbackQuery") == [{"callback_query_id": click["callback_query"]["id"], "text": "Releasing the handoff…"}]
    assert (await harness.handoff(sid))["release_reason"] == "release_token"
    assert (await post(harness, reply)).status_code == 404  # a polling channel takes no webhooks

    await harness.desk.stop()
    assert [t for t in asyncio.all_tasks() if t.get_name() == "telegram-poll-1"] == []


@pytest.mark.parametrize(("setup", "expected"), [
    ("webhook", "can't use getUpdates method while webhook is active"),
    ("poller", "Only one process may poll getUpdates per bot token"),
])
async def test_a_second_poller_or_a_webhook_makes_polling_unavailable_with_a_clear_reason(
    fake: FakeTelegram, start_desk: StartDesk, setup: str, expected: str,
) -> None:
    if setup == "webhook":
        fake.webhook = {"url": "https://prod.example.com/webhooks/1"}
    else:
        fake.fail("getUpdates", 409, "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running")
    harness = await start(start_desk, fake, channel={"mode": "polling"})
    [state] = (await harness.client.get("/healthz")).json()["channels"]
    assert state["available"] is False
    assert "409 Conflict" in state["problem"]
    assert expected in state["problem"]
    assert fake.webhook == ({"url": "https://prod.example.com/webhooks/1"} if setup == "webhook" else None)  # never deleted


# --------------------------------------------------------------------------- forum groups


async def test_a_forum_group_gets_a_topic_per_handoff_and_routes_by_topic(forum: FakeTelegram, start_desk: StartDesk) -> None:
    fake = forum
    harness = await start(start_desk, fake)
    ana, ben = await harness.conversation("Ana"), await harness.conversation("Ben", email=None)
    sid_a, dispatch_a = await dispatch_of(harness, fake, ana)
    _sid_b, dispatch_b = await dispatch_of(harness, fake, ben)
    topic_a, topic_b = (request["message_thread_id"] for request in fake.requests("sendMessage"))
    short_a = (await harness.handoff(sid_a))["short_code"]
    assert fake.topics[topic_a] == f"{short_a} · Ana"
    assert topic_a != topic_b
    assert dispatch_a["message_thread_id"] == topic_a
    assert "Write in this topic" in dispatch_a["text"]
    assert buttons(dispatch_a)[-1] == {"text": "Release", "callback_data": f"release:topic:{topic_a}"}

    await harness.say(ana, "Anyone?")
    await harness.desk.settle()
    assert fake.requests("sendMessage")[-1]["message_thread_id"] == topic_a
    # any message in the topic is for its handoff, reply or not; the General topic is not
    await deliver(harness, fake.message_update("Plain message in Ana's topic.", topic_id=topic_a))
    await deliver(harness, fake.message_update("In the General topic."))
    await deliver(harness, fake.message_update("For Ben.", topic_id=topic_b, reply_to=dispatch_b["message_id"], user=KIM))
    assert await harness.human_texts(ana) == [("Sam Lee", "Plain message in Ana's topic.")]
    assert await harness.human_texts(ben) == [("Kim", "For Ben.")]
    await deliver(harness, fake.message_update("/release", topic_id=topic_a))
    assert (await harness.handoff(sid_a))["release_reason"] == "release_token"


async def test_a_forum_dispatch_retried_after_a_failure_reuses_its_topic(forum: FakeTelegram, start_desk: StartDesk) -> None:
    fake = forum
    harness = await start(start_desk, fake, delivery={"base_backoff": "1ms"})
    fake.fail("sendMessage", 500, "Internal Server Error")
    await dispatch_of(harness, fake, await harness.conversation())
    assert len(fake.requests("createForumTopic")) == 1
    assert len(fake.requests("sendMessage")) == 2


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(("entry", "problem"), [
    ({"bot_token": "not a token"}, "channels[0].bot_token: does not look like a Telegram bot token"),
    ({"chat_id": "support"}, "channels[0].chat_id: must be the group's numeric id"),
    ({"mode": "poll"}, "channels[0].mode: Input should be 'webhook' or 'polling'"),
    ({"webhook_secret": "has spaces!"}, "channels[0].webhook_secret: must be 1-256 characters"),
    ({"api_base_url": "api.telegram.org"}, "channels[0].api_base_url: must be an http(s) URL"),
    ({"bot_tokn": TOKEN}, "channels[0].bot_tokn: unknown key; did you mean 'bot_token'?"),
])
def test_config_problems_are_named_by_key_path_without_echoing_secrets(entry: dict[str, Any], problem: str) -> None:

    channel = {"id": 1, "kind": "telegram", "label": "TG", "bot_token": "123456:SECRET-value", "chat_id": "-100123", **entry}
    text = config_problem(channels=[channel])
    assert problem in text
    assert "SECRET-value" not in text


def test_a_minimal_config_takes_the_documented_defaults() -> None:
    config = make_config("sqlite:///x.db", channels=[
        {"id": 2, "kind": "telegram", "label": "TG", "bot_token": TOKEN, "chat_id": "-1001234", "webhook_secret": ""},
        {"id": 3, "kind": "telegram", "label": "TG2", "bot_token": TOKEN, "chat_id": "@support_staff"},
    ])
    first, second = config.channels
    assert (first.chat_id, first.mode, first.api_base_url, first.webhook_secret) == (-1001234, "webhook", "https://api.telegram.org/bot", None)
    assert second.chat_id == "@support_staff"


# --------------------------------------------------------------------------- the whole story


async def test_the_whole_story_through_the_http_api(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake)
    cid = await harness.conversation("Ana")
    await harness.say(cid, "My parcel 1234 is lost")
    sid, told = await harness.ask_for_a_person(cid)
    assert told.startswith("I've asked our team to join")
    dispatch = fake.sent()[-1]
    assert "Ana: My parcel 1234 is lost" in dispatch["text"]

    assert (await harness.say(cid, "Are you there?"))["routed_to"] == "human"
    await harness.desk.settle()
    relay = fake.sent()[-1]
    assert relay["text"] == "Ana: Are you there?"
    assert relay["reply_to_message"]["message_id"] == dispatch["message_id"]

    await deliver(harness, fake.message_update("Hi Ana, I'm Sam. Found it at the depot.", reply_to=relay["message_id"]))
    assert (await harness.messages(cid))[-1]["text"] == "Hi Ana, I'm Sam. Found it at the depot."
    await deliver(harness, fake.message_update("/release resolved Parcel re-routed", reply_to=dispatch["message_id"]))
    messages = await harness.messages(cid)
    resumed = next(m for m in messages if m["role"] == "system")
    assert resumed["text"].startswith("[Bot resumed — ")
    assert "Outcome: resolved" in resumed["text"]
    assert "released (resolved)" in fake.sent()[-1]["text"]
    assert (await harness.say(cid, "Thanks!"))["routed_to"] == "agent"
    assert (await harness.handoff(sid))["state"] == "released"


async def test_the_adapter_can_be_driven_without_the_desk(fake: FakeTelegram) -> None:
    """start() needs nothing but a ChannelContext: the inbound sink receives polled messages."""
    received: asyncio.Queue[InboundMessage] = asyncio.Queue()
    adapter = TelegramChannel(TelegramConfig(id=9, label="TG", bot_token=TOKEN, chat_id=STAFF_CHAT_ID, mode="polling",
                                             api_base_url=fake.base_url, poll_timeout=5))
    await adapter.start(ChannelContext(public_url="http://127.0.0.1:8000", deliver_inbound=received.put, render=Renderer().render))
    try:
        receipt = await adapter.send(Notice(handoff_id="hs_x", text="Hello staff", about="routing"))
        await fake.queue(fake.message_update("Who is this?", reply_to=int(receipt.message_id or 0)))
        message = await asyncio.wait_for(received.get(), timeout=10)
    finally:
        await adapter.stop()
    assert message.thread_key == f"{STAFF_CHAT_ID}:{receipt.message_id}"
    assert message.author == "Sam Lee"
    assert message.dedupe_key
    assert message.dedupe_key.startswith("update:")


# --------------------------------------------------------------------------- approvals



def refund_action(**overrides: Any) -> dict[str, Any]:
    return shared_refund_action(1, **overrides)



async def approvals_desk(start_desk: StartDesk, fake: FakeTelegram, *actions: dict[str, Any], **overrides: Any) -> Harness:
    return await start(start_desk, fake, actions=list(actions) or [refund_action()], delivery={"base_backoff": "10ms"},
                       **overrides)


async def ask(harness: Harness, fake: FakeTelegram, cid: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    """The agent calls the gated action; returns the approval id and the prompt as Telegram shows it."""
    return await harness.ask_approval(cid, **arguments), fake.sent()[-1]



async def test_an_approval_prompt_is_escaped_html_with_an_inline_keyboard(
    fake: FakeTelegram, start_desk: StartDesk, calls: list[dict[str, Any]]
) -> None:
    harness = await approvals_desk(start_desk, fake)
    cid = await harness.conversation("Ana <b>@everyone</b>")
    aid, prompt = await ask(harness, fake, cid, order_id="<i>1234</i> & co", amount=25.5, note="@samlee /release\u202e")
    request = fake.requests("sendMessage")[0]
    assert request["parse_mode"] == "HTML"
    assert "reply_parameters" not in request
    assert "message_thread_id" not in request
    assert "&lt;i&gt;1234&lt;/i&gt; &amp; co" in request["text"]  # escaped: Telegram accepted the HTML
    text = prompt["text"]
    deadline = (await harness.approval(aid))["deadline"][:16].replace("T", " ")
    assert text.startswith("🔴 HIGH RISK · Approval needed: may the assistant run refund_order for Ana <b>@\u2060everyone</b>?")
    assert "\nRefund an order to the original payment method\n" in text
    assert "Risk: high" in text
    # the exact arguments, in a <pre> block; invisible characters shown as their JSON escapes
    assert ('Exactly these arguments:\n{\n  "order_id": "<i>1234</i> & co",\n  "amount": 25.5,\n'
            '  "note": "@samlee /release\\u202e"\n}') in text
    assert "<pre>{\n" in request["text"]
    assert f"Unanswered by {deadline} UTC means denied." in text
    assert aid in text
    assert re.search(r'<a href="http://desk\.test/a/[^"]+">decision page</a>', request["text"])
    assert buttons(prompt) == [{"text": "Approve", "callback_data": f"ap:{aid}:y"},
                               {"text": "Deny", "callback_data": f"ap:{aid}:n"},
                               {"text": "Always allow", "callback_data": f"ap:{aid}:a"}]
    assert all(len(b["callback_data"].encode()) <= 64 for b in buttons(prompt))
    assert calls == []


async def test_a_two_person_prompt_says_so_in_one_bold_line_and_a_one_person_prompt_does_not(
    fake: FakeTelegram, start_desk: StartDesk
) -> None:
    """Through the desk: the core tells the brief how many people must approve."""
    two_people = refund_action(policy="ask_always", approvals_required=2)
    one_person = refund_action(id="refund_small", policy="ask_always")
    harness = await approvals_desk(start_desk, fake, two_people, one_person)
    cid = await harness.conversation("Ana")
    await harness.ask_approval(cid, order_id="1", amount=5)
    await harness.ask_approval(cid, "refund_small", order_id="2", amount=5)
    two, one = (request["text"] for request in fake.requests("sendMessage"))
    assert f"\n<b>Risk:</b> high\n<b>{TWO_PEOPLE}</b>\n<b>Exactly these arguments:</b>\n" in two
    assert "\n<b>Risk:</b> high\n<b>Exactly these arguments:</b>\n" in one
    assert "two people" not in one


async def test_the_two_person_line_is_all_that_sets_its_prompt_apart(fake: FakeTelegram, adapter: TelegramChannel) -> None:
    await adapter.send(ApprovalPrompt(text="…", approval=refund_brief("ap_1", subscriber_name="Ana <b>")))
    await adapter.send(ApprovalPrompt(text="…", approval=refund_brief("ap_1", subscriber_name="Ana <b>", approvals_required=2)))
    one, two = (request["text"] for request in fake.requests("sendMessage"))
    assert two.replace(f"<b>{TWO_PEOPLE}</b>\n", "", 1) == one.replace(
        "the first answer counts", "two different people must approve, one denial denies")  # and its last line says so
    assert "two people" not in one


async def test_approve_in_telegram_runs_the_action_answers_the_press_and_takes_the_buttons_away(
    fake: FakeTelegram, start_desk: StartDesk, calls: list[dict[str, Any]]
) -> None:
    harness = await approvals_desk(start_desk, fake)
    cid = await harness.conversation("Ana")
    aid, prompt = await ask(harness, fake, cid, order_id="1234", amount=25.5)
    press = fake.callback_update(prompt["message_id"], user=KIM, data=f"ap:{aid}:y")
    response = await post(harness, press)
    assert response.status_code == 200
    assert response.json() == {"method": "answerCallbackQuery", "callback_query_id": press["callback_query"]["id"],
                               "text": "Your answer (approve) is recorded; the prompt changes once it is decided."}
    await harness.desk.settle()
    assert calls == [{"order_id": "1234", "amount": 25.5}]
    assert await harness.system_texts(cid) == ['[Approval — refund_order was approved and ran with the arguments you gave. '
                                                'Result: {"refund_id": "rf_1", "amount": 25.5}]']
    view = await harness.approval(aid)
    assert view["state"] == "approved"
    assert view["receipt"]["decided_by"] == "Kim"
    assert view["receipt"]["via"] == "channel:1"

    # the buttons are gone and the closing text answers the prompt
    assert fake.requests("editMessageReplyMarkup") == [{"chat_id": STAFF_CHAT_ID, "message_id": prompt["message_id"]}]
    assert buttons(fake.messages[(STAFF_CHAT_ID, prompt["message_id"])]) == []
    closing = fake.sent()[-1]
    assert closing["text"] == f"Approved by Kim: refund_order ({aid}) will run."
    assert closing["reply_to_message"]["message_id"] == prompt["message_id"]
    assert buttons(closing) == []

    # Telegram redelivers the same update, or someone else presses on an old copy: nothing more runs
    await deliver(harness, press)
    await deliver(harness, fake.callback_update(prompt["message_id"], user=SAM, data=f"ap:{aid}:n"))
    assert calls == [{"order_id": "1234", "amount": 25.5}]
    assert len(await harness.system_texts(cid)) == 1
    assert (await harness.approval(aid))["state"] == "approved"
    assert await harness.stored_events() == 2  # the redelivery was dropped


async def test_deny_in_telegram_is_permission_denied_and_nothing_runs(
    fake: FakeTelegram, start_desk: StartDesk, calls: list[dict[str, Any]]
) -> None:
    harness = await approvals_desk(start_desk, fake)
    cid = await harness.conversation("Ana")
    aid, prompt = await ask(harness, fake, cid, order_id="1234", amount=900)
    await deliver(harness, fake.callback_update(prompt["message_id"], user=SAM, data=f"ap:{aid}:n"))
    assert calls == []
    [note] = await harness.system_texts(cid)
    assert note.startswith("[Approval — refund_order: PERMISSION_DENIED. A person denied it.")
    assert fake.sent()[-1]["text"] == f"Denied by Sam Lee: refund_order ({aid}) will not run."


async def test_forged_foreign_or_late_presses_change_nothing(
    fake: FakeTelegram, start_desk: StartDesk, calls: list[dict[str, Any]]
) -> None:
    harness = await approvals_desk(start_desk, fake, refund_action(timeout="1m"))
    cid = await harness.conversation("Ana")
    aid, prompt = await ask(harness, fake, cid, order_id="1234", amount=5)
    press = fake.callback_update(prompt["message_id"], data=f"ap:{aid}:y")
    assert (await post(harness, press, secret="wrong-secret")).status_code == 403
    assert (await post(harness, press, secret=None)).status_code == 403
    ignored = [
        fake.callback_update(prompt["message_id"], user=OTHER_BOT, data=f"ap:{aid}:y"),  # a bot
        fake.callback_update(prompt["message_id"], data=f"ap:{aid}:x"),  # not one of our choices
        fake.callback_update(prompt["message_id"], data=f"ap:{aid}:y:extra"),
    ]
    elsewhere = fake.callback_update(prompt["message_id"], data=f"ap:{aid}:y")
    elsewhere["callback_query"]["message"]["chat"] = {"id": -100999, "type": "supergroup", "title": "Elsewhere"}
    for update in [*ignored, elsewhere]:
        response = await post(harness, update)
        assert response.status_code == 200
        assert response.json() == {
            "method": "answerCallbackQuery", "callback_query_id": update["callback_query"]["id"]}
    await harness.desk.settle()
    assert await harness.stored_events() == 0
    assert calls == []

    harness.desk.clock.advance(timedelta(seconds=61))  # type: ignore[attr-defined]
    assert await harness.desk.approvals.expire_due() == 1
    await harness.desk.settle()
    assert fake.sent()[-1]["text"].startswith("Nobody answered in time: refund_order")
    assert buttons(fake.messages[(STAFF_CHAT_ID, prompt["message_id"])]) == []
    await deliver(harness, press)  # too late
    assert calls == []
    assert (await harness.approval(aid))["state"] == "expired"


async def test_always_allow_in_telegram_and_none_for_ask_always(
    fake: FakeTelegram, start_desk: StartDesk, calls: list[dict[str, Any]]
) -> None:
    harness = await approvals_desk(start_desk, fake, refund_action(),
                                   refund_action(id="refund_big", policy="ask_always", risk="medium"))
    cid = await harness.conversation("Ana")
    aid, prompt = await ask(harness, fake, cid, order_id="1", amount=5)
    await deliver(harness, fake.callback_update(prompt["message_id"], data=f"ap:{aid}:a"))
    assert (await harness.approval(aid))["receipt"]["always_allow"] is True
    assert (await harness.tool(cid, "refund_order", {"order_id": "2", "amount": 7}))["status"] == "done"
    assert len(calls) == 2

    big = await harness.tool(cid, "refund_big", {"order_id": "3", "amount": 700})
    await harness.desk.settle()
    prompt = fake.sent()[-1]
    assert prompt["text"].startswith("🟠 Approval needed: may the assistant run refund_big")
    assert [b["text"] for b in buttons(prompt)] == ["Approve", "Deny"]
    assert big["status"] == "APPROVAL_PENDING"


async def test_a_prompt_with_huge_arguments_still_fits_one_message_and_says_what_was_cut(
    fake: FakeTelegram, start_desk: StartDesk
) -> None:
    harness = await approvals_desk(start_desk, fake)
    cid = await harness.conversation("Ana")
    _, prompt = await ask(harness, fake, cid, order_id="1", amount=5, note="<&> " * 3000)
    assert utf16_len(prompt["text"]) <= MESSAGE_LIMIT
    full = '{\n  "order_id": "1",\n  "amount": 5,\n  "note": "' + "<&> " * 3000 + '"\n}'
    shown = prompt["text"].split("Exactly these arguments:\n", 1)[1].split("\n[… cut here: ", 1)[0]
    assert full.startswith(shown)
    assert len(shown) > 2000
    assert f"[… cut here: {len(full) - len(shown)} more characters. The decision page shows every argument.]" in prompt["text"]


async def test_after_a_restart_the_press_itself_tells_which_message_to_clean_up(
    fake: FakeTelegram, start_desk: StartDesk, database_url: str, calls: list[dict[str, Any]]
) -> None:
    harness = await approvals_desk(start_desk, fake)
    cid = await harness.conversation("Ana")
    aid, prompt = await ask(harness, fake, cid, order_id="1234", amount=5)
    await harness.desk.stop()
    again = await approvals_desk(start_desk, fake, url=database_url)
    await deliver(again, fake.callback_update(prompt["message_id"], data=f"ap:{aid}:y"))
    assert calls == [{"order_id": "1234", "amount": 5}]
    assert buttons(fake.messages[(STAFF_CHAT_ID, prompt["message_id"])]) == []
    assert fake.sent()[-1]["reply_to_message"]["message_id"] == prompt["message_id"]


async def test_a_closing_notice_for_a_prompt_it_never_saw_is_posted_on_its_own(fake: FakeTelegram) -> None:
    adapter = TelegramChannel(TelegramConfig(id=9, label="TG", bot_token=TOKEN, chat_id=STAFF_CHAT_ID, mode="polling",
                                             api_base_url=fake.base_url, poll_timeout=0))
    await adapter.start(standalone_context())
    try:
        text = "Approved by @samlee <Sam>: refund_order (ap_x) will run."
        receipt = await adapter.send(ApprovalClosed(text=text, approval=refund_brief("ap_x")))
    finally:
        await adapter.stop()
    [closing] = fake.sent()
    assert closing["text"] == "Approved by @\u2060samlee <Sam>: refund_order (ap_x) will run."
    assert "reply_to_message" not in closing
    assert receipt.message_id == str(closing["message_id"])
    assert fake.requests("editMessageReplyMarkup") == []


async def test_a_closing_notice_that_carries_the_prompt_s_receipt_takes_its_buttons_away(fake: FakeTelegram) -> None:
    """A restarted adapter knows no prompt; the notice's `prompt` (the prompt's receipt) tells it."""
    adapter = TelegramChannel(TelegramConfig(id=9, label="TG", bot_token=TOKEN, chat_id=STAFF_CHAT_ID, mode="polling",
                                             api_base_url=fake.base_url, poll_timeout=0))
    await adapter.start(standalone_context())
    try:
        markup = {"inline_keyboard": [[{"text": "Approve", "callback_data": "ap:ap_x:y"}]]}
        prompt = await fake._api_sendMessage({"chat_id": STAFF_CHAT_ID, "text": "a prompt", "reply_markup": markup})
        text = "Denied by Kim: refund_order (ap_x) will not run."
        await adapter.send(ApprovalClosed(text=text, approval=refund_brief("ap_x"),
                                          prompt={"chat_id": STAFF_CHAT_ID, "message_id": prompt["message_id"]}))
    finally:
        await adapter.stop()
    assert buttons(fake.messages[(STAFF_CHAT_ID, prompt["message_id"])]) == []
    assert fake.sent()[-1]["reply_to_message"]["message_id"] == prompt["message_id"]


async def test_a_dispatch_outside_office_hours_says_so_under_its_title(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start(start_desk, fake, channel={"hours": "mondays"}, hours=CLOSED_HOURS, clock=closed_clock())
    _sid, message = await dispatch_of(harness, fake, await harness.conversation())
    assert message["text"].splitlines()[1] == OUTSIDE_HOURS_LINE


# --------------------------------------------------------------------------- routes: claims

TAKEN = "Taken by Sam <b>Lee</b> & co at 14:02 in Slack."


async def standalone(fake: FakeTelegram, *, subscribers: bool = False) -> TelegramChannel:
    """In webhook mode (the webhook itself is not registered: the desk's URL is not https)."""
    adapter = TelegramChannel(TelegramConfig(id=1, label="TG", bot_token=TOKEN, chat_id=STAFF_CHAT_ID, api_base_url=fake.base_url,
                                             webhook_secret=SECRET))
    await adapter.start(dataclasses.replace(standalone_context(), subscribers=subscribers))
    return adapter


@pytest.fixture
async def adapter(fake: FakeTelegram) -> AsyncIterator[TelegramChannel]:
    """The adapter alone, started against the fake."""
    channel = await standalone(fake)
    yield channel
    await channel.stop()


async def webhook_call(adapter: TelegramChannel, update: dict[str, Any]) -> WebhookReply:
    return await adapter.handle_webhook(WebhookRequest(body=json.dumps(update).encode(), query={}, url="",
                                                       headers={"x-telegram-bot-api-secret-token": SECRET}))


def keyboard(message: dict[str, Any]) -> list[list[str]]:
    return [[b["text"] for b in row] for row in message.get("reply_markup", {}).get("inline_keyboard", [])]


async def test_a_claimable_dispatch_offers_a_claim_button_and_a_plain_one_does_not(fake: FakeTelegram, adapter: TelegramChannel) -> None:
    await adapter.send(route_dispatch("hs_route1"))
    await adapter.send(route_dispatch("hs_plain1", claimable=False))
    routed, plain = fake.sent()
    assert keyboard(routed) == [["I'm on it"], ["Return form", "Release"]]
    assert buttons(routed)[0]["callback_data"] == "claim"
    assert keyboard(plain) == [["Return form", "Release"]]
    assert adapter.capabilities.edits is True


async def test_the_claim_button_is_a_claim_press_on_the_release_buttons_thread_with_who_pressed(fake: FakeTelegram, adapter: TelegramChannel) -> None:
    receipt = await adapter.send(route_dispatch())
    dispatch_id = int(receipt.message_id or 0)
    claimed = await webhook_call(adapter, fake.callback_update(dispatch_id, user=KIM, data="claim"))
    released = await webhook_call(adapter, fake.callback_update(dispatch_id, user=KIM, data="release"))
    [claim], [release] = claimed.messages, released.messages
    assert isinstance(claim, ClaimPress)
    assert isinstance(release, ReleasePress)
    assert claim.thread_key == release.thread_key == receipt.thread_key == f"{STAFF_CHAT_ID}:{dispatch_id}"
    assert (claim.author, claim.user_id, release.user_id) == ("Kim", str(KIM["id"]), str(KIM["id"]))
    assert claim.dedupe_key and claim.dedupe_key.startswith("update:")
    assert json.loads(claimed.body)["text"] == "Claiming the handoff… the first claim takes it."


async def test_in_a_forum_the_claim_button_names_the_topic(forum: FakeTelegram) -> None:
    adapter = await standalone(forum)
    try:
        receipt = await adapter.send(route_dispatch())
        pressed = await webhook_call(adapter, forum.callback_update(int(receipt.message_id or 0), user=KIM))
    finally:
        await adapter.stop()
    [claim] = pressed.messages
    assert isinstance(claim, ClaimPress)
    assert claim.thread_key == receipt.thread_key == f"{STAFF_CHAT_ID}:topic:{receipt.thread['topic_id']}"


async def test_a_claimed_notice_takes_only_the_claim_button_away_and_is_posted(fake: FakeTelegram, adapter: TelegramChannel) -> None:
    receipt = await adapter.send(route_dispatch())
    await adapter.send(Notice(handoff_id="hs_route1", text="Kim has it.", about="claimed", thread=receipt.thread))
    dispatch, notice = fake.sent()
    assert keyboard(dispatch) == [["Return form", "Release"]]
    assert (notice["text"], notice["reply_to_message"]["message_id"]) == ("Kim has it.", dispatch["message_id"])


async def sent_before_a_restart(fake: FakeTelegram) -> Receipt:
    """A dispatch sent by an adapter that has stopped since: a new one knows nothing of it."""
    first = await standalone(fake)
    try:
        return await first.send(route_dispatch())
    finally:
        await first.stop()


async def test_after_a_restart_the_claim_press_tells_which_buttons_to_keep(fake: FakeTelegram) -> None:
    receipt = await sent_before_a_restart(fake)
    again = await standalone(fake)
    try:
        await webhook_call(again, fake.callback_update(int(receipt.message_id or 0), user=KIM, data="claim"))
        await again.send(Notice(handoff_id="hs_route1", text="Kim has it.", about="claimed", thread=receipt.thread))
    finally:
        await again.stop()
    assert keyboard(fake.sent()[0]) == [["Return form", "Release"]]


async def test_a_taken_notice_edits_the_dispatch_in_place_escaped_and_posts_nothing(fake: FakeTelegram, adapter: TelegramChannel) -> None:
    receipt = await adapter.send(route_dispatch())
    brief_text = fake.sent()[0]["text"]
    taken = await adapter.send(Notice(handoff_id="hs_route1", text=TAKEN, about="taken", thread=receipt.thread))
    [dispatch] = fake.sent()
    assert dispatch["text"] == f"{brief_text}\n\n{TAKEN}"  # the HTML was escaped: Telegram shows the tags as typed
    assert "reply_markup" not in dispatch
    [edit] = fake.requests("editMessageText")
    assert (edit["chat_id"], edit["message_id"]) == (STAFF_CHAT_ID, dispatch["message_id"])
    assert (taken.message_id, taken.thread_key, taken.thread) == (receipt.message_id, receipt.thread_key, receipt.thread)


async def test_a_taken_notice_for_a_dispatch_this_process_never_saw_drops_its_buttons_and_is_posted(fake: FakeTelegram) -> None:
    """The Bot API cannot read a message back, so after a restart its text cannot be edited."""
    receipt = await sent_before_a_restart(fake)
    again = await standalone(fake)
    try:
        await again.send(Notice(handoff_id="hs_route1", text=TAKEN, about="taken", thread=receipt.thread))
    finally:
        await again.stop()
    dispatch, notice = fake.sent()
    assert "reply_markup" not in dispatch
    assert (notice["text"], notice["reply_to_message"]["message_id"]) == (TAKEN, dispatch["message_id"])
    assert fake.requests("editMessageText") == []


async def test_every_event_names_the_telegram_user_who_acted(fake: FakeTelegram, adapter: TelegramChannel) -> None:
    receipt = await adapter.send(route_dispatch())
    replied = await webhook_call(adapter, fake.message_update("on it", user=SAM, reply_to=int(receipt.message_id or 0)))
    markup = {"inline_keyboard": [[{"text": "Approve", "callback_data": "ap:ap_x:y"}]]}
    prompt = await fake._api_sendMessage({"chat_id": STAFF_CHAT_ID, "text": "a prompt", "reply_markup": markup})
    decided = await webhook_call(adapter, fake.callback_update(prompt["message_id"], user=KIM))
    [text], [decision] = replied.messages, decided.messages
    assert isinstance(text, RecipientText)
    assert isinstance(decision, Decision)
    assert (text.user_id, text.author, decision.user_id, decision.author) == ("501", "Sam Lee", "502", "Kim")


async def test_a_subscriber_on_the_front_is_named_by_their_telegram_user_id(fake: FakeTelegram) -> None:
    adapter = await standalone(fake, subscribers=True)
    try:
        opened = await webhook_call(adapter, fake.private_update("/start", user=ANA))
        wrote = await webhook_call(adapter, fake.private_update("Where is my order?", user=ANA))
    finally:
        await adapter.stop()
    [start_], [text] = opened.messages, wrote.messages
    assert isinstance(start_, ChatOpened)
    assert isinstance(text, SubscriberText)
    assert (start_.user_id, text.user_id, text.chat, text.author) == ("601", "601", "601", "Ana Silva")
