"""The Slack channel, through the real slack_sdk client against a fake Slack Web API.

Everything here runs the whole desk (HTTP API, outbox, inbound dedup, state machine) on a
SQLite file; only Slack is fake (tests/fake_slack.py): a local server that answers like
Slack and records what it received. Callbacks are signed exactly as Slack signs them.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from bot.config import Config, ConfigError
from bot.store.models import InboundEvent
from channels.base import (
    ApprovalPrompt,
    ChannelAuthError,
    ClaimPress,
    Decision,
    InboundMessage,
    Notice,
    RecipientText,
    ReleasePress,
    TranscriptLine,
    TransientChannelError,
    WebhookRequest,
)
from channels.slack import SlackChannel, SlackConfig, plain_from_mrkdwn, transcript_text
from tests.approval_actions import TWO_PEOPLE, refund_brief
from tests.approval_actions import refund_action as shared_refund_action
from tests.conftest import SECRET as DESK_SECRET
from tests.conftest import CliRun, Harness, StartDesk, probe_config
from tests.fake_slack import BOT, FakeSlack, Fault, block_actions, message_event, signed_headers
from tests.fakes import standalone_context
from tests.office_hours import CLOSED_HOURS, OUTSIDE_HOURS_LINE, closed_clock
from tests.route_dispatches import route_dispatch

TOKEN = "xoxb-test-token"
SIGNING_SECRET = "slack-signing-secret-for-tests"
CHANNEL = "C0HANDOFF"
SUMMARY = "Ana's order #1234 is a week late and she wants a person to check it."
ACTION = "Look up order #1234 and tell Ana when it will arrive."


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    """The channel does not depend on the database: SQLite only."""
    return sqlite_url


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    slack = await FakeSlack(token=TOKEN, channels=(CHANNEL,), users={"U0SAM": "Sam", "U0KIM": "Kim"},
                            unlisted_users={"U0NEW": "Noor"}).start()
    yield slack
    await slack.stop()


def slack_entry(fake: FakeSlack, **overrides: Any) -> dict[str, Any]:
    return {"id": 2, "kind": "slack", "label": "Sales support", "estimated_response": "within the hour",
            "bot_token": TOKEN, "signing_secret": SIGNING_SECRET, "channel": CHANNEL, "api_base_url": fake.url, **overrides}


@pytest.fixture
async def desk(start_desk: StartDesk, fake: FakeSlack) -> Harness:
    return await start_desk(channels=[slack_entry(fake)], delivery={"base_backoff": "10ms"})


# --------------------------------------------------------------------------- helpers


async def webhook(h: Harness, body: bytes, *, content_type: str = "application/json", secret: str = SIGNING_SECRET,
                  **signing: Any) -> Any:
    headers = signed_headers(secret, body, content_type=content_type, **signing)
    return await h.client.post("/webhooks/2", content=body, headers=headers)


async def reply(h: Harness, thread_ts: str, text: str, *, user: str = "U0SAM", **extra: Any) -> None:
    """A person writes in a handoff thread; wait until the desk has handled it."""
    response = await webhook(h, message_event(channel=CHANNEL, text=text, user=user, thread_ts=thread_ts, **extra))
    assert response.status_code == 200, response.text
    await h.desk.settle()


async def click_release(h: Harness, message_ts: str, sid: str, *, user: str = "U0SAM", name: str = "sam") -> None:
    body = block_actions(channel=CHANNEL, user=user, user_name=name, message_ts=message_ts, value=sid)
    response = await webhook(h, body, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 200, response.text
    await h.desk.settle()


async def handoff_in_slack(h: Harness, fake: FakeSlack, cid: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    """Start a handoff to the Slack channel; returns its id and the dispatch as Slack stored it."""
    sid = (await h.start_handoff(cid, channel_id=2, **fields))["handoff_session_id"]
    dispatch = next(m for m in fake.top_level(CHANNEL) if m["metadata"]["event_payload"]["handoff"] == sid)
    return sid, dispatch


def mrkdwn_texts(blocks: list[dict[str, Any]]) -> list[str]:
    """Every mrkdwn string in a layout: the only places Slack would parse mentions."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "mrkdwn":
                found.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(blocks)
    return found


def section_texts(message: dict[str, Any], kind: str) -> list[str]:
    return [b["text"]["text"] for b in message["blocks"] if b["type"] == "section" and b.get("text", {}).get("type") == kind]



async def inbound_count(h: Harness) -> int:
    async with h.desk.db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(InboundEvent)) or 0)


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(("change", "problem"), [
    ({"bot_token": "xoxp-user-token"}, "channels[0].bot_token: must be a bot token starting with xoxb-"),
    ({"channel": "#support"}, "channels[0].channel: must be a channel id such as C0123ABCD"),
    ({"signing_secret": " "}, "channels[0].signing_secret: required"),
    ({"api_base_url": "slack.com/api"}, "channels[0].api_base_url: must be an http(s) URL"),
    ({"chanel": "C0HANDOFF"}, "channels[0].chanel: unknown key; did you mean 'channel'?"),
    ({"request_timeout": 0}, "channels[0].request_timeout: Input should be greater than 0"),
])
def test_config_problems_are_named_and_secrets_never_echoed(change: dict[str, Any], problem: str) -> None:
    entry = {"id": 1, "kind": "slack", "label": "Sales", "bot_token": "xoxb-SECRET-1", "signing_secret": "SIGNSECRET",
             "channel": "C0HANDOFF", **change}
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping({"secret_key": DESK_SECRET, "channels": [entry]})
    text = str(caught.value)
    assert problem in text
    assert "SECRET-1" not in text
    assert "SIGNSECRET" not in text
    assert "xoxp-user-token" not in text


def test_a_valid_config_keeps_secrets_secret() -> None:
    config = Config.from_mapping({"secret_key": DESK_SECRET, "channels": [
        {"id": 3, "kind": "slack", "label": "Sales", "bot_token": "xoxb-1-2-abc", "signing_secret": "s3cr3t", "channel": "C0123"}]})
    slack = config.channel(3)
    assert isinstance(slack, SlackConfig)
    assert slack.api_base_url == "https://slack.com/api/"
    assert slack.request_timeout == 10
    assert "xoxb-1-2-abc" not in repr(slack)
    assert "s3cr3t" not in repr(slack)


# --------------------------------------------------------------------------- dispatch


async def test_the_dispatch_is_a_thread_starter_with_buttons_metadata_and_nothing_that_pings(
    desk: Harness, fake: FakeSlack
) -> None:
    cid = await desk.conversation(name="Ana <!here>")
    await desk.say(cid, "Where is my order <@U0KIM>? It's late & I'm worried")
    sid, dispatch = await handoff_in_slack(
        desk, fake, cid, urgency="high",
        summary="Ana says <!channel> & <@U1> must check order #1234, a week late.",
        expected_action="Check the carrier <https://evil.example|here> and tell Ana.",
        extra_context={"order": "<!everyone> #1234", "plan": "gold"},
        expected_return=[{"name": "eta_date", "type": "date", "required": True, "description": "When it <arrives>"}],
    )
    call = fake.calls_to("chat.postMessage")[0]
    assert call.token == TOKEN
    assert call.args["channel"] == CHANNEL
    assert "thread_ts" not in call.args
    assert (call.args["parse"], call.args["link_names"], call.args["unfurl_links"]) == ("none", False, False)
    assert dispatch["metadata"]["event_type"] == "handoff_desk_message"
    assert dispatch["metadata"]["event_payload"]["handoff"] == sid
    assert dispatch["metadata"]["event_payload"]["delivery_key"].startswith("hd_")

    blocks = dispatch["blocks"]
    header = blocks[0]
    handoff = await desk.handoff(sid)
    assert header["type"] == "header"
    assert header["text"]["type"] == "plain_text"
    assert header["text"]["text"] == f"🔴 URGENT · Handoff {handoff['short_code']}: Ana <!here> needs a person"
    # mrkdwn everywhere is escaped: no mention, link or broadcast can come from user text
    for text in mrkdwn_texts(blocks) + [dispatch["text"]]:
        assert "<" not in text, text
        assert ">" not in text, text
    summary, action = section_texts(dispatch, "mrkdwn")[:2]
    assert summary == "*Summary*\nAna says &lt;!channel&gt; &amp; &lt;@U1&gt; must check order #1234, a week late."
    assert action == "*What to do*\nCheck the carrier &lt;https://evil.example|here&gt; and tell Ana."
    assert all(t.get("verbatim") for b in blocks for t in [b.get("text") or {}] if t.get("type") == "mrkdwn")
    fields = next(b["fields"] for b in blocks if "fields" in b)
    assert [f["text"] for f in fields] == [
        "*Subscriber*\nAna &lt;!here&gt; (ana@example.com)", "*Urgency*\nhigh", "*Contact back*\nana@example.com"]
    texts = section_texts(dispatch, "mrkdwn")
    assert "*Context*\n• *order*: &lt;!everyone&gt; #1234\n• *plan*: gold" in texts
    assert "*Please hand back*\n• Eta date [date, YYYY-MM-DD] (required) — When it &lt;arrives&gt;" in texts
    # the transcript is plain_text: shown exactly as typed, never parsed
    transcript = section_texts(dispatch, "plain_text")[0]
    assert "Ana <!here>: Where is my order <@U0KIM>? It's late & I'm worried" in transcript

    actions = next(b for b in blocks if b["type"] == "actions")["elements"]
    form, release = actions
    assert (form["text"]["text"], form["url"]) == ("Fill return form", handoff["form_url"])
    assert (release["action_id"], release["value"], release["text"]["text"]) == ("handoff_release", sid, "Release")
    assert release["confirm"]["confirm"]["text"] == "Release"
    # the plain-text fallback is the full brief, escaped for mrkdwn
    assert dispatch["text"].startswith(f"[URGENT] Handoff {handoff['short_code']}: Ana &lt;!here&gt; needs a person")
    assert "Ana says &lt;!channel&gt; &amp; &lt;@U1&gt;" in dispatch["text"]

    # the receipt: the message ts is the thread every follow-up goes to
    session = await desk.desk.handoffs.get(sid)
    assert session.channel_message_id == dispatch["ts"]
    assert session.thread_key == f"{CHANNEL}:{dispatch['ts']}"
    assert session.thread == {"channel": CHANNEL, "thread_ts": dispatch["ts"]}


async def test_a_long_transcript_keeps_the_newest_lines_and_says_how_many_are_left_out(
    desk: Harness, fake: FakeSlack
) -> None:
    cid = await desk.conversation()
    for i in range(12):
        await desk.say(cid, f"message {i:02d} " + "lorem ipsum " * 25)
    _, dispatch = await handoff_in_slack(desk, fake, cid)
    transcript = section_texts(dispatch, "plain_text")[0]
    assert len(transcript) <= 3000
    assert transcript.splitlines()[-1].startswith("Assistant: ")  # the agent answered last
    assert "message 11 " in transcript
    assert "message 00 " not in transcript
    kept = len(transcript.splitlines())
    label = next(b for b in dispatch["blocks"] if b["type"] == "context")["elements"][0]["text"]
    assert label == f"*Recent conversation* · {20 - kept} earlier messages not shown"


def test_a_single_huge_message_is_cut_to_fit_a_section() -> None:
    lines = [TranscriptLine(role="subscriber", author="Ana", text="x" * 5000, at="2025-01-01T00:00:00Z")]
    text, omitted = transcript_text(lines)
    assert len(text) == 3000
    assert text.endswith("…")
    assert omitted == 0


async def test_an_unknown_channel_fails_the_dispatch_with_a_hint_naming_it(start_desk: StartDesk, fake: FakeSlack) -> None:
    h = await start_desk(channels=[slack_entry(fake, channel="C0MISSING")])
    cid = await h.conversation()
    result = await h.tool(cid, "handoff_request", {"channel_id": 2, "summary": SUMMARY, "expected_action": ACTION})
    assert result["error"] == "dispatch_failed"
    assert "Slack has no channel C0MISSING the bot can see" in result["details"]["hint"]
    assert len(fake.calls_to("chat.postMessage")) == 1  # permanent: not retried


@pytest.mark.parametrize(("error", "hint"), [
    ("not_in_channel", "the bot is not a member of C0HANDOFF: invite it (type /invite @handoff-desk there)"),
    ("token_revoked", "Slack refused the bot token (token_revoked): check bot_token of channel 2"),
    ("msg_too_long", "the message is too long for Slack (msg_too_long)"),
    ("invalid_blocks", "Slack rejected the message layout (invalid_blocks)"),
    ("something_new", "Slack refused chat.postMessage (something_new)"),
])
async def test_refusals_fail_the_dispatch_at_once_with_a_hint_naming_the_problem(
    desk: Harness, fake: FakeSlack, error: str, hint: str
) -> None:
    fake.fail_next("chat.postMessage", Fault(error=error))
    cid = await desk.conversation()
    result = await desk.tool(cid, "handoff_request", {"channel_id": 2, "summary": SUMMARY, "expected_action": ACTION})
    assert result["error"] == "dispatch_failed"
    assert hint in result["details"]["hint"]
    assert TOKEN not in json.dumps(result)
    assert len(fake.calls_to("chat.postMessage")) == 1  # permanent: never retried
    assert (await desk.handoff(result["details"]["handoff_session_id"]))["state"] == "failed"


# --------------------------------------------------------------------------- threads and relays


async def test_two_handoffs_in_one_channel_never_cross(desk: Harness, fake: FakeSlack) -> None:
    ana = await desk.conversation("Ana")
    ben = await desk.conversation("Ben", email="ben@example.com")
    (sid_ana, d_ana), (sid_ben, d_ben) = await asyncio.gather(
        handoff_in_slack(desk, fake, ana), handoff_in_slack(desk, fake, ben))
    assert d_ana["ts"] != d_ben["ts"]

    await desk.say(ana, "Ana here, any news?")
    await desk.say(ben, "Ben here, still waiting")
    await desk.desk.settle()
    for thread, author, text in ((d_ana["ts"], "Ana", "Ana here, any news?"), (d_ben["ts"], "Ben", "Ben here, still waiting")):
        [relay] = fake.posts(CHANNEL, thread_ts=thread)
        assert relay["blocks"][0]["elements"][0]["text"] == f":speech_balloon: *{author}* wrote:"
        assert section_texts(relay, "plain_text") == [text]
        assert relay["metadata"]["event_payload"]["handoff"] == (sid_ana if author == "Ana" else sid_ben)

    await reply(desk, d_ben["ts"], "Hi Ben, it ships today", user="U0KIM")
    await reply(desk, d_ana["ts"], "Hi Ana, checking now", user="U0SAM")
    assert await desk.human_texts(ana) == [("Sam", "Hi Ana, checking now")]
    assert await desk.human_texts(ben) == [("Kim", "Hi Ben, it ships today")]


async def test_a_reply_in_the_thread_reaches_the_subscriber_as_plain_text(desk: Harness, fake: FakeSlack) -> None:
    cid = await desk.conversation()
    sid, dispatch = await handoff_in_slack(desk, fake, cid)
    await reply(desk, dispatch["ts"], "Hi Ana, <@U0KIM> &amp; I are on it: <https://shop.example/o/1234|your order> &lt;3")
    assert await desk.human_texts(cid) == [("Sam", "Hi Ana, @Kim & I are on it: your order (https://shop.example/o/1234) <3")]
    assert "relayed_to_subscriber" in await desk.kinds(sid)


async def test_what_is_not_a_persons_reply_in_a_handoff_thread_is_ignored(desk: Harness, fake: FakeSlack) -> None:
    cid = await desk.conversation()
    _, dispatch = await handoff_in_slack(desk, fake, cid)
    thread = dispatch["ts"]
    ignored = [
        message_event(channel=CHANNEL, text="our own relay", user=BOT["user_id"], thread_ts=thread, bot_id=BOT["bot_id"]),
        message_event(channel=CHANNEL, text="our bot without bot_id", user=BOT["user_id"], thread_ts=thread),
        message_event(channel=CHANNEL, text="another app", user="U0APP", thread_ts=thread, bot_id="B0OTHER"),
        message_event(channel=CHANNEL, text="legacy bot", user="U0APP", thread_ts=thread, subtype="bot_message"),
        message_event(channel=CHANNEL, text="edited", user="U0SAM", thread_ts=thread, subtype="message_changed"),
        message_event(channel=CHANNEL, text="", user="U0SAM", thread_ts=thread, subtype="message_deleted"),
        message_event(channel=CHANNEL, text="top-level chatter", user="U0SAM", thread_ts=None),
        message_event(channel="C0ELSEWHERE", text="other channel", user="U0SAM", thread_ts=thread),
    ]
    for body in ignored:
        response = await webhook(desk, body)
        assert response.status_code == 200
    await desk.desk.settle()
    assert await inbound_count(desk) == 0  # not even stored
    # a person's reply in a thread that is no handoff is stored, then ignored by the core
    await reply(desk, "1699999999.000001", "unrelated thread")
    assert await inbound_count(desk) == 1
    assert await desk.human_texts(cid) == []


async def test_a_newcomer_is_named_once_slack_has_told_us_who_they_are(desk: Harness, fake: FakeSlack) -> None:
    cid = await desk.conversation()
    _, dispatch = await handoff_in_slack(desk, fake, cid)
    await reply(desk, dispatch["ts"], "first", user="U0NEW")  # not in users.list: the ack does not wait for a lookup
    await desk.desk.channels.get(2).settle()
    await reply(desk, dispatch["ts"], "second", user="U0NEW")
    assert await desk.human_texts(cid) == [("U0NEW", "first"), ("Noor", "second")]
    assert [c.args["user"] for c in fake.calls_to("users.info")] == ["U0NEW"]  # cached


# --------------------------------------------------------------------------- release


async def test_release_typed_in_the_thread_releases_with_the_release_token(desk: Harness, fake: FakeSlack) -> None:
    cid = await desk.conversation()
    sid, dispatch = await handoff_in_slack(desk, fake, cid)
    await reply(desk, dispatch["ts"], " /release resolved Re-shipped with express delivery")
    handoff = await desk.handoff(sid)
    assert (handoff["state"], handoff["release_reason"], handoff["outcome"]) == ("released", "release_token", "resolved")
    assert (handoff["released_by"], handoff["note"]) == ("Sam", "Re-shipped with express delivery")
    resume = [m["text"] for m in await desk.messages(cid) if m["role"] == "system"]
    assert resume[0].startswith("[Bot resumed — the recipient released the conversation. Outcome: resolved.")
    notice = fake.posts(CHANNEL, thread_ts=dispatch["ts"])[-1]
    assert section_texts(notice, "mrkdwn") == [f"Handoff {handoff['short_code']} released (resolved); "
                                               "the assistant has taken the conversation back."]


async def test_the_release_button_releases_with_the_release_token(desk: Harness, fake: FakeSlack) -> None:
    cid = await desk.conversation()
    sid, dispatch = await handoff_in_slack(desk, fake, cid)
    # the form button only opens its link; Slack still tells us, and nothing happens
    form_click = block_actions(channel=CHANNEL, user="U0SAM", user_name="sam", message_ts=dispatch["ts"], value="",
                               action_id="handoff_form")
    assert (await webhook(desk, form_click, content_type="application/x-www-form-urlencoded")).status_code == 200
    assert (await desk.handoff(sid))["state"] == "active"

    await click_release(desk, dispatch["ts"], sid)
    await click_release(desk, dispatch["ts"], sid, user="U0KIM", name="kim")  # too late: the thread is no handoff now
    handoff = await desk.handoff(sid)
    assert (handoff["state"], handoff["release_reason"], handoff["released_by"]) == ("released", "release_token", "Sam")
    assert (await desk.kinds(sid)).count("handoff_released") == 1
    assert [m["role"] for m in await desk.messages(cid)].count("system") == 1


async def test_the_release_button_of_one_handoff_releases_only_that_one(desk: Harness, fake: FakeSlack) -> None:
    ana, ben = await desk.conversation("Ana"), await desk.conversation("Ben")
    sid_ana, d_ana = await handoff_in_slack(desk, fake, ana)
    sid_ben, _ = await handoff_in_slack(desk, fake, ben)
    await click_release(desk, d_ana["ts"], sid_ana)
    assert (await desk.handoff(sid_ana))["state"] == "released"
    assert (await desk.handoff(sid_ben))["state"] == "active"


# --------------------------------------------------------------------------- verification


async def test_forged_stale_or_unsigned_callbacks_get_401_and_store_nothing(desk: Harness, fake: FakeSlack) -> None:
    cid = await desk.conversation()
    sid, dispatch = await handoff_in_slack(desk, fake, cid)
    event = message_event(channel=CHANNEL, text="forged", user="U0SAM", thread_ts=dispatch["ts"])
    click = block_actions(channel=CHANNEL, user="U0SAM", user_name="sam", message_ts=dispatch["ts"], value=sid)
    form = "application/x-www-form-urlencoded"
    attempts = [
        await webhook(desk, event, secret="not-the-secret"),
        await webhook(desk, event, timestamp=int(time.time()) - 6 * 60),  # stale: a replay
        await webhook(desk, event, timestamp=int(time.time()) + 6 * 60),
        await webhook(desk, click, content_type=form, secret="not-the-secret"),
        await desk.client.post("/webhooks/2", content=event, headers={"content-type": "application/json"}),
        await desk.client.post("/webhooks/2", content=event, headers={
            **signed_headers(SIGNING_SECRET, event), "x-slack-request-timestamp": "soon"}),
        await desk.client.post("/webhooks/2", content=event, headers={  # refused, not a 500
            **signed_headers(SIGNING_SECRET, event), "x-slack-signature": "v0=sïgnätüre".encode()}),
    ]
    # a body changed after signing
    headers = signed_headers(SIGNING_SECRET, event)
    attempts.append(await desk.client.post("/webhooks/2", content=event.replace(b"forged", b"edited"), headers=headers))
    assert [r.status_code for r in attempts] == [401] * len(attempts)
    await desk.desk.settle()
    assert await inbound_count(desk) == 0
    assert await desk.human_texts(cid) == []
    assert (await desk.handoff(sid))["state"] == "active"


async def test_a_signed_body_that_does_not_parse_is_a_400_and_a_foreign_type_a_415(desk: Harness) -> None:
    """The signature is checked on the raw bytes before anything is parsed; a signed body that
    is not JSON (or a form whose payload is not) gets the usual error body, as on /api."""
    form = "application/x-www-form-urlencoded"
    for body, content_type in ((b"{not json", "application/json"), (b"[1, 2]", "application/json"),
                               (b"payload=%7Bnope", form), (b"payload=%FF", form)):
        response = await webhook(desk, body, content_type=content_type)
        assert (response.status_code, response.json()["error"]) == (400, "invalid_json"), body
    unsigned = await desk.client.post("/webhooks/2", content=b"{not json", headers={"content-type": "application/json"})
    assert unsigned.status_code == 401  # the signature first, then the parse
    text = await webhook(desk, b"{}", content_type="text/plain")
    assert (text.status_code, text.json()["error"]) == (415, "unsupported_media_type")
    assert await inbound_count(desk) == 0


async def test_url_verification_is_answered_with_the_challenge(desk: Harness) -> None:
    body = json.dumps({"token": "x", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
                       "type": "url_verification"}).encode()
    response = await webhook(desk, body)
    assert response.status_code == 200
    assert response.json() == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}
    unsigned = await desk.client.post("/webhooks/2", content=body, headers={"content-type": "application/json"})
    assert unsigned.status_code == 401


# --------------------------------------------------------------------------- failures


async def test_a_server_error_on_the_dispatch_is_retried_after_checking_it_did_not_land(
    desk: Harness, fake: FakeSlack
) -> None:
    fake.fail_next("chat.postMessage", Fault(status=503, text="<html>upstream connect error</html>"))
    cid = await desk.conversation()
    sid, _ = await handoff_in_slack(desk, fake, cid)
    assert len(fake.top_level(CHANNEL)) == 1
    assert [c.method for c in fake.calls] == [
        "auth.test", "users.list", "chat.postMessage", "conversations.history", "chat.postMessage"]
    assert fake.calls_to("conversations.history")[0].args["include_all_metadata"] in ("1", "true")
    kinds = await desk.kinds(sid)
    assert "delivery_retry_scheduled" in kinds
    assert "handoff_activated" in kinds


async def test_a_post_that_landed_but_timed_out_is_reconciled_not_posted_twice(
    start_desk: StartDesk, fake: FakeSlack
) -> None:
    h = await start_desk(channels=[slack_entry(fake, request_timeout=0.3)], delivery={"base_backoff": "10ms"})
    fake.fail_next("chat.postMessage", Fault(lose_answer=True))
    cid = await h.conversation()
    sid, dispatch = await handoff_in_slack(h, fake, cid)
    assert len(fake.top_level(CHANNEL)) == 1
    assert len(fake.calls_to("chat.postMessage")) == 1
    assert (await h.desk.handoffs.get(sid)).thread_key == f"{CHANNEL}:{dispatch['ts']}"
    retry = next(e for e in await h.events(sid) if e["kind"] == "delivery_retry_scheduled")
    assert retry["detail"]["error_type"] == "UncertainDeliveryError"

    # the same for a relay in the thread (found through conversations.replies)
    fake.fail_next("chat.postMessage", Fault(lose_answer=True))
    await h.say(cid, "Did you get this?")
    await fake.wait_for(lambda: fake.posts(CHANNEL, thread_ts=dispatch["ts"]))
    await h.desk.settle()  # the attempt times out and is scheduled again
    h.desk.clock.advance(timedelta(minutes=1))
    await h.desk.settle()
    assert len(fake.posts(CHANNEL, thread_ts=dispatch["ts"])) == 1
    assert len(fake.calls_to("chat.postMessage")) == 2
    assert fake.calls_to("conversations.replies")[0].args["ts"] == dispatch["ts"]
    assert (await h.kinds(sid)).count("relayed_to_recipient") == 1


async def test_a_refused_token_fails_the_probe_without_echoing_it(fake: FakeSlack) -> None:
    """The channel this leaves unavailable is a case of tests/test_channel_contract.py."""
    entry = slack_entry(fake, bot_token="xoxb-revoked-0000")
    entry.pop("kind")
    adapter = SlackChannel(SlackConfig.model_validate(entry))
    with pytest.raises(ChannelAuthError) as caught:
        await adapter.probe()
    assert "Slack refused the bot token (invalid_auth)" in caught.value.hint
    assert "xoxb-revoked-0000" not in caught.value.hint + str(caught.value)
    await adapter.stop()


async def test_check_config_probe_reports_a_refused_token_clearly(tmp_path: Path, fake: FakeSlack) -> None:
    def config_file(name: str, token: str) -> Path:
        path = tmp_path / name
        path.write_text(
            f"secret_key: {DESK_SECRET}\nchannels:\n"
            f"  - {{id: 3, kind: slack, label: Sales support, bot_token: {token}, signing_secret: s, "
            f"channel: {CHANNEL}, api_base_url: '{fake.url}'}}\n"
        )
        return path

    async def probe(path: Path) -> CliRun:
        return await probe_config(path)

    code, out, err = await probe(config_file("bad.yaml", "xoxb-revoked-0000"))
    assert code == 1
    assert ("channels[0] (slack 'Sales support'): FAILED, Slack refused the bot token (invalid_auth): "
            "check bot_token of channel 3") in err
    assert "xoxb-revoked-0000" not in out + err

    code, out, err = await probe(config_file("good.yaml", TOKEN))
    assert code == 0, err
    assert (f"channels[0] (slack 'Sales support'): ok, bot @handoff-desk in team Acme Support (T0ACME), "
            f"posting to {CHANNEL}") in out


# --------------------------------------------------------------------------- the whole story


async def test_the_whole_story_through_slack(start_desk: StartDesk, fake: FakeSlack) -> None:
    h = await start_desk(channels=[slack_entry(fake)])
    cid = await h.conversation("Ana", email="ana@example.com")
    await h.say(cid, "My order #1234 is a week late")

    # the subscriber asks for a person: the agent hands off to the Slack channel
    sid, told = await h.ask_for_a_person(cid)
    assert told.startswith("I've asked our team to join — usually within the hour.")
    [dispatch] = fake.top_level(CHANNEL)
    handoff = await h.handoff(sid)
    assert dispatch["blocks"][0]["text"]["text"] == f"Handoff {handoff['short_code']}: Ana needs a person"
    assert "My order #1234 is a week late" in section_texts(dispatch, "plain_text")[0]

    # subscriber → Slack thread
    relayed = await h.say(cid, "Are you there?")
    assert relayed["routed_to"] == "human"
    await h.desk.settle()
    [relay] = fake.posts(CHANNEL, thread_ts=dispatch["ts"])
    assert section_texts(relay, "plain_text") == ["Are you there?"]

    # Slack thread → subscriber
    await reply(h, dispatch["ts"], "Hi Ana, I'm Sam. It left the depot today.")
    assert await h.human_texts(cid) == [("Sam", "Hi Ana, I'm Sam. It left the depot today.")]

    # /release typed in the thread hands the conversation back to the agent
    await reply(h, dispatch["ts"], "/release resolved Parcel left the depot")
    messages = await h.messages(cid)
    resume = next(m for m in messages if m["role"] == "system")
    assert resume["text"].startswith("[Bot resumed — the recipient released the conversation. Outcome: resolved. "
                                     "Parcel left the depot")
    assert messages[-1]["role"] == "agent"  # the agent has picked the conversation up
    assert "released (resolved)" in section_texts(fake.posts(CHANNEL, thread_ts=dispatch["ts"])[-1], "mrkdwn")[0]
    after = await h.say(cid, "Thanks!")
    assert after["routed_to"] == "agent"
    assert len(fake.posts(CHANNEL, thread_ts=dispatch["ts"])) == 2  # the relay and the release notice, nothing more


# --------------------------------------------------------------------------- pieces


def test_slack_markup_from_people_becomes_plain_text() -> None:
    names = {"U0KIM": "Kim"}.get
    assert plain_from_mrkdwn("<@U0KIM> <@U0X> <#C1|general> <!here> <mailto:a@b.c|a@b.c> &lt;b&gt; &amp;amp;", names) == (
        "@Kim @U0X #general @here a@b.c <b> &amp;")


async def test_notices_link_only_the_desks_own_urls(fake: FakeSlack) -> None:
    config = SlackConfig(id=2, label="Sales", bot_token=TOKEN, signing_secret=SIGNING_SECRET, channel=CHANNEL,
                         api_base_url=fake.url)
    adapter = SlackChannel(config)
    await adapter.start(standalone_context())
    fake.messages[CHANNEL].append({"type": "message", "ts": "1700000000.000001", "text": "a dispatch"})
    text = "Handoff K7: a new return-form link:\nhttp://desk.test/f/abc.def\nnot https://evil.example/x & <!here>"
    thread = {"channel": CHANNEL, "thread_ts": "1700000000.000001"}
    receipt = await adapter.send(Notice(handoff_id="hs_1", text=text, about="form_link", thread=thread, delivery_key="hd-9"))
    assert receipt.thread_key == f"{CHANNEL}:1700000000.000001"
    assert receipt.thread == thread
    [notice] = fake.posts(CHANNEL, thread_ts="1700000000.000001")
    assert section_texts(notice, "mrkdwn") == ["Handoff K7: a new return-form link:\n<http://desk.test/f/abc.def>\n"
                                               "not https://evil.example/x &amp; &lt;!here&gt;"]
    await adapter.stop()


async def test_a_new_form_link_from_the_owner_arrives_in_the_thread_as_a_link(desk: Harness, fake: FakeSlack) -> None:
    cid = await desk.conversation()
    sid, dispatch = await handoff_in_slack(desk, fake, cid)
    url = await desk.desk.handoffs.reissue_form_link(sid, actor="owner")
    await desk.desk.settle()
    [notice] = fake.posts(CHANNEL, thread_ts=dispatch["ts"])
    [text] = section_texts(notice, "mrkdwn")
    assert f"<{url}>" in text
    assert url.startswith("http://desk.test/f/")


# --------------------------------------------------------------------------- approvals

FORM = "application/x-www-form-urlencoded"


def refund_action(**overrides: Any) -> dict[str, Any]:
    return shared_refund_action(2, **overrides)



async def approvals_desk(start_desk: StartDesk, fake: FakeSlack, *actions: dict[str, Any], **overrides: Any) -> Harness:
    return await start_desk(channels=[slack_entry(fake)], actions=list(actions) or [refund_action()],
                            delivery={"base_backoff": "10ms"}, **overrides)


async def ask(h: Harness, fake: FakeSlack, cid: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    """The agent calls the gated action; returns the approval id and its prompt as Slack stored it."""
    aid = await h.ask_approval(cid, **arguments)
    prompt = next(m for m in fake.top_level(CHANNEL) if m["metadata"]["event_payload"]["handoff"] == aid)
    return aid, prompt


async def press(h: Harness, prompt: dict[str, Any], action_id: str, *, value: str | None = None, user: str = "U0SAM",
                name: str = "sam", trigger_id: str | None = None, channel: str = CHANNEL, **signing: Any) -> Any:
    value = value if value is not None else prompt["metadata"]["event_payload"]["handoff"]
    body = block_actions(channel=channel, user=user, user_name=name, message_ts=prompt["ts"], value=value,
                         action_id=action_id, block_id="approval_actions", trigger_id=trigger_id)
    response = await webhook(h, body, content_type=FORM, **signing)
    await h.desk.settle()
    return response


def prompt_buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]]


def preformatted(message: dict[str, Any]) -> str:
    return "".join(t["text"] for b in message["blocks"] if b["type"] == "rich_text" for e in b["elements"]
                   if e["type"] == "rich_text_preformatted" for t in e["elements"])



async def test_an_approval_prompt_is_a_top_level_post_with_buttons_and_nothing_that_pings(
    start_desk: StartDesk, fake: FakeSlack, calls: list[dict[str, Any]]
) -> None:
    h = await approvals_desk(start_desk, fake)
    cid = await h.conversation(name="Ana <!here>")
    aid, prompt = await ask(h, fake, cid, order_id="<!channel> #1234", amount=25.5, note="to <@U0KIM> & co\u202eevil")
    post = fake.calls_to("chat.postMessage")[0]
    assert post.args["channel"] == CHANNEL
    assert "thread_ts" not in post.args  # in no handoff's thread
    assert (post.args["parse"], post.args["link_names"], post.args["unfurl_links"]) == ("none", False, False)
    assert prompt["metadata"]["event_payload"]["notice"] == "approval"
    blocks = prompt["blocks"]
    assert blocks[0] == {"type": "header", "text": {"type": "plain_text", "text": "🔴 HIGH RISK · Approval needed: refund_order",
                                                    "emoji": True}}
    assert blocks[1]["text"] == {"type": "plain_text", "emoji": True, "text": (
        "May the assistant run refund_order for Ana <!here>?\n\nRefund an order to the original payment method")}
    deadline = (await h.approval(aid))["deadline"][:16].replace("T", " ")
    assert [f["text"] for f in blocks[2]["fields"]] == ["Risk: high", f"Answer by: {deadline} UTC"]
    # the exact arguments, preformatted rich text: literal, never parsed; invisible characters shown escaped
    assert preformatted(prompt) == ('{\n  "order_id": "<!channel> #1234",\n  "amount": 25.5,\n'
                                    '  "note": "to <@U0KIM> & co\\u202eevil"\n}')
    # mrkdwn only for our own words: nothing a person or the agent wrote is in it
    for text in mrkdwn_texts(blocks):
        assert "!here" not in text
        assert "!channel" not in text
        assert "@U0KIM" not in text
        assert "Ana" not in text
    help_text = mrkdwn_texts(blocks)[-1]
    url = re.search(r"http://desk\.test/a/\S+", prompt["text"]).group()  # type: ignore[union-attr]
    assert f"<{url}|decision page>" in help_text
    assert aid in help_text
    assert f"{deadline} UTC" in help_text
    approve, deny, always = prompt_buttons(prompt)
    assert (approve["action_id"], approve["text"]["text"], approve["style"], approve["value"]) == (
        "approval_approve", "Approve", "primary", aid)
    assert (deny["action_id"], deny["text"]["text"], deny["style"], deny["value"]) == ("approval_deny", "Deny", "danger", aid)
    assert (always["action_id"], always["text"]["text"], always["value"]) == ("approval_always", "Always allow", aid)
    assert "for the rest of this conversation" in always["confirm"]["text"]["text"]
    # the notification fallback is the core's full prompt, escaped for mrkdwn
    assert prompt["text"].startswith("[HIGH RISK] Approval needed: may the assistant run refund_order for Ana &lt;!here&gt;?")
    assert "<" not in prompt["text"].replace("&lt;", "")
    assert calls == []


async def test_a_two_person_prompt_has_one_more_plain_text_section_that_says_so(fake: FakeSlack) -> None:
    adapter = await standalone(fake)
    try:
        await adapter.send(ApprovalPrompt(text="…", approval=refund_brief("ap_1", subscriber_name="Ana <!here>")))
        await adapter.send(ApprovalPrompt(text="…", approval=refund_brief("ap_1", subscriber_name="Ana <!here>",
                                                                          approvals_required=2)))
    finally:
        await adapter.stop()
    one_person, two_people = (m["blocks"] for m in fake.top_level(CHANNEL))
    assert two_people[3] == {"type": "section", "text": {"type": "plain_text", "text": TWO_PEOPLE, "emoji": True}}
    help_two, help_one = (blocks[-1]["elements"][0]["text"] for blocks in (two_people, one_person))
    assert help_two == help_one.replace("The first answer counts", "Two different people must approve (one denial denies)")
    assert two_people[:3] + two_people[4:-1] == one_person[:-1]  # otherwise the prompt of one person, block for block
    assert not any("two people" in json.dumps(block) for block in one_person)


async def test_approve_in_slack_runs_the_action_once_and_the_prompt_loses_its_buttons(
    start_desk: StartDesk, fake: FakeSlack, calls: list[dict[str, Any]]
) -> None:
    h = await approvals_desk(start_desk, fake)
    cid = await h.conversation()
    aid, prompt = await ask(h, fake, cid, order_id="1234", amount=25.5)
    response = await press(h, prompt, "approval_approve", trigger_id="111.222.abc")
    assert response.status_code == 200
    assert response.text == ""  # acknowledged at once, no Slack call in between
    assert calls == [{"order_id": "1234", "amount": 25.5}]
    assert await h.system_texts(cid) == ['[Approval — refund_order was approved and ran with the arguments you gave. '
                                          'Result: {"refund_id": "rf_1", "amount": 25.5}]']
    view = await h.approval(aid)
    assert view["state"] == "approved"
    assert view["receipt"]["decided_by"] == "Sam"
    assert view["receipt"]["via"] == "channel:2"

    # the prompt is edited in place: the buttons and the dead link give way to how it ended
    [update] = fake.calls_to("chat.update")
    assert (update.args["channel"], update.args["ts"]) == (CHANNEL, prompt["ts"])
    edited = fake.top_level(CHANNEL)[0]
    assert prompt_buttons(edited) == []
    assert "decision page" not in json.dumps(edited["blocks"])
    assert edited["blocks"][-1]["text"] == {"type": "plain_text", "emoji": True,
                                            "text": f"Approved by Sam: refund_order ({aid}) will run."}
    assert preformatted(edited) == preformatted(prompt)  # still shows what was approved
    assert len(fake.top_level(CHANNEL)) == 1  # nothing else posted

    # Slack delivers the same press again (a retry), or someone presses again: nothing more runs
    await press(h, prompt, "approval_approve", trigger_id="111.222.abc")
    await press(h, prompt, "approval_deny", user="U0KIM", name="kim")
    assert calls == [{"order_id": "1234", "amount": 25.5}]
    assert (await h.approval(aid))["state"] == "approved"
    assert len(await h.system_texts(cid)) == 1
    async with h.desk.db.read() as session:
        results = list((await session.scalars(select(InboundEvent.result).order_by(InboundEvent.id))).all())
    assert results == ["approval approved", f"approval {aid} is already approved"]  # the replay was not even stored


async def test_deny_in_slack_is_permission_denied_and_nothing_runs(
    start_desk: StartDesk, fake: FakeSlack, calls: list[dict[str, Any]]
) -> None:
    h = await approvals_desk(start_desk, fake)
    cid = await h.conversation()
    aid, prompt = await ask(h, fake, cid, order_id="1234", amount=900)
    await press(h, prompt, "approval_deny", user="U0KIM", name="kim")
    assert calls == []
    [note] = await h.system_texts(cid)
    assert note.startswith("[Approval — refund_order: PERMISSION_DENIED. A person denied it.")
    assert fake.top_level(CHANNEL)[0]["blocks"][-1]["text"]["text"] == f"Denied by Kim: refund_order ({aid}) will not run."


async def test_forged_misplaced_or_late_presses_change_nothing(
    start_desk: StartDesk, fake: FakeSlack, calls: list[dict[str, Any]]
) -> None:
    h = await approvals_desk(start_desk, fake, refund_action(timeout="1m"))
    cid = await h.conversation()
    aid, prompt = await ask(h, fake, cid, order_id="1234", amount=5)
    assert (await press(h, prompt, "approval_approve", secret="not-the-secret")).status_code == 401
    assert (await press(h, prompt, "approval_approve", timestamp=int(time.time()) - 6 * 60)).status_code == 401  # a replay
    assert (await press(h, prompt, "approval_approve", channel="C0ELSEWHERE")).status_code == 200  # not our channel
    assert await inbound_count(h) == 0
    # a press naming an approval that does not exist is stored, and the core ignores it
    await press(h, prompt, "approval_approve", value="ap_doesnotexist")
    assert calls == []
    assert (await h.approval(aid))["state"] == "pending"

    # past the deadline: the sweep denies it, the prompt says so, a late press runs nothing
    h.desk.clock.advance(timedelta(seconds=61))  # type: ignore[attr-defined]
    assert await h.desk.approvals.expire_due() == 1
    await h.desk.settle()
    assert fake.top_level(CHANNEL)[0]["blocks"][-1]["text"]["text"].startswith("Nobody answered in time: refund_order")
    await press(h, prompt, "approval_approve")
    assert calls == []
    assert (await h.approval(aid))["state"] == "expired"


async def test_always_allow_in_slack_lets_the_same_shape_run_without_asking(
    start_desk: StartDesk, fake: FakeSlack, calls: list[dict[str, Any]]
) -> None:
    h = await approvals_desk(start_desk, fake)
    cid = await h.conversation()
    aid, prompt = await ask(h, fake, cid, order_id="1", amount=5)
    await press(h, prompt, "approval_always")
    assert (await h.approval(aid))["receipt"]["always_allow"] is True
    again = await h.tool(cid, "refund_order", {"order_id": "2", "amount": 7})
    assert again["status"] == "done"
    assert len(calls) == 2
    assert len(fake.top_level(CHANNEL)) == 1  # no second prompt


async def test_ask_always_offers_no_always_allow_button(start_desk: StartDesk, fake: FakeSlack) -> None:
    h = await approvals_desk(start_desk, fake, refund_action(policy="ask_always", risk="low"))
    _, prompt = await ask(h, fake, await h.conversation(), order_id="1", amount=5)
    assert [b["action_id"] for b in prompt_buttons(prompt)] == ["approval_approve", "approval_deny"]
    assert prompt["blocks"][0]["text"]["text"] == "Approval needed: refund_order"


async def test_long_arguments_are_cut_with_a_note_never_silently(start_desk: StartDesk, fake: FakeSlack) -> None:
    h = await approvals_desk(start_desk, fake)
    _, prompt = await ask(h, fake, await h.conversation(), order_id="1", amount=5, note="word " * 4000)
    parts = [b for b in prompt["blocks"] if b["type"] == "rich_text"]
    assert 1 < len(parts) <= 3
    assert all(len(p["elements"][0]["elements"][0]["text"]) <= 2900 for p in parts)
    shown = preformatted(prompt)
    assert shown.startswith('{\n  "order_id": "1",\n  "amount": 5,\n  "note": "word word')
    full = json.dumps({"order_id": "1", "amount": 5, "note": "word " * 4000}, indent=2)
    note = next(b for b in prompt["blocks"] if b["type"] == "context" and b["elements"][0]["type"] == "plain_text")
    assert full.startswith(shown)
    assert note["elements"][0]["text"] == (f"[… cut here: {len(full) - len(shown)} more characters. "
                                           "The decision page shows every argument.]")


async def test_after_a_restart_the_closing_notice_finds_its_prompt_in_the_history(
    start_desk: StartDesk, fake: FakeSlack, database_url: str, calls: list[dict[str, Any]]
) -> None:
    h = await approvals_desk(start_desk, fake)
    cid = await h.conversation()
    aid, prompt = await ask(h, fake, cid, order_id="1234", amount=5)
    await h.desk.stop()
    again = await approvals_desk(start_desk, fake, url=database_url)
    await press(again, prompt, "approval_approve")
    assert calls == [{"order_id": "1234", "amount": 5}]
    assert fake.calls_to("conversations.history")[-1].args["include_all_metadata"] in ("1", "true")
    [update] = fake.calls_to("chat.update")
    assert update.args["ts"] == prompt["ts"]
    assert prompt_buttons(fake.top_level(CHANNEL)[0]) == []
    assert len(fake.top_level(CHANNEL)) == 1


async def test_a_prompt_that_cannot_be_edited_gets_the_closing_text_as_a_new_post(
    start_desk: StartDesk, fake: FakeSlack, calls: list[dict[str, Any]]
) -> None:
    h = await approvals_desk(start_desk, fake)
    cid = await h.conversation()
    aid, prompt = await ask(h, fake, cid, order_id="1234", amount=5)
    fake.fail_next("chat.update", Fault(error="cant_update_message"))
    await press(h, prompt, "approval_deny")
    closing = fake.top_level(CHANNEL)[-1]
    assert closing["ts"] != prompt["ts"]
    assert closing["metadata"]["event_payload"]["notice"] == "approval_closed"
    assert section_texts(closing, "plain_text") == [f"Denied by Sam: refund_order ({aid}) will not run."]


async def test_a_rate_limited_edit_is_retried_by_the_core(start_desk: StartDesk, fake: FakeSlack,
                                                          calls: list[dict[str, Any]]) -> None:
    h = await approvals_desk(start_desk, fake)
    aid, prompt = await ask(h, fake, await h.conversation(), order_id="1234", amount=5)
    fake.fail_next("chat.update", Fault(status=429, error="ratelimited", headers={"Retry-After": "3"}))
    await press(h, prompt, "approval_approve")
    assert prompt_buttons(fake.top_level(CHANNEL)[0]) != []  # not yet
    h.desk.clock.advance(timedelta(seconds=4))  # type: ignore[attr-defined]
    await h.desk.settle()
    assert prompt_buttons(fake.top_level(CHANNEL)[0]) == []
    assert len(fake.calls_to("chat.update")) == 2
    assert len(fake.top_level(CHANNEL)) == 1
    assert calls == [{"order_id": "1234", "amount": 5}]


async def test_a_dispatch_outside_office_hours_says_so_under_its_header(start_desk: StartDesk, fake: FakeSlack) -> None:
    desk = await start_desk(channels=[slack_entry(fake, hours="mondays")], hours=CLOSED_HOURS, clock=closed_clock())
    _sid, dispatch = await handoff_in_slack(desk, fake, await desk.conversation())
    assert dispatch["blocks"][1]["text"]["text"] == f"_{OUTSIDE_HOURS_LINE}_"


# --------------------------------------------------------------------------- routes: claims

TAKEN = "Taken by Kim <!here> & co at 14:02 in Telegram."


async def standalone(fake: FakeSlack) -> SlackChannel:
    adapter = SlackChannel(SlackConfig(id=2, label="Sales", bot_token=TOKEN, signing_secret=SIGNING_SECRET, channel=CHANNEL,
                                       api_base_url=fake.url))
    await adapter.start(standalone_context())
    return adapter


@pytest.fixture
async def adapter(fake: FakeSlack) -> AsyncIterator[SlackChannel]:
    """The adapter alone, started against the fake."""
    channel = await standalone(fake)
    yield channel
    await channel.stop()


async def signed_call(adapter: SlackChannel, body: bytes, content_type: str = FORM) -> list[InboundMessage]:
    """A call Slack signs, through the adapter's own verification and parsing."""
    request = WebhookRequest(body=body, headers=signed_headers(SIGNING_SECRET, body, content_type=content_type), query={},
                             url="http://desk.test/webhooks/2")
    reply_ = await adapter.handle_webhook(request)
    assert reply_.status == 200
    return reply_.messages


def action_ids(message: dict[str, Any]) -> list[str]:
    return [e["action_id"] for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]]


async def test_a_claimable_dispatch_offers_a_claim_button_and_a_plain_one_does_not(fake: FakeSlack, adapter: SlackChannel) -> None:
    await adapter.send(route_dispatch("hs_route1"))
    await adapter.send(route_dispatch("hs_plain1", claimable=False))
    routed, plain_one = fake.top_level(CHANNEL)
    assert action_ids(routed) == ["handoff_claim", "handoff_form", "handoff_release"]
    assert [e["text"]["text"] for b in routed["blocks"] if b["type"] == "actions" for e in b["elements"]][0] == "I'm on it"
    assert action_ids(plain_one) == ["handoff_form", "handoff_release"]
    assert adapter.capabilities.edits is True


async def test_the_claim_button_is_a_claim_press_on_the_release_buttons_thread_with_who_pressed(fake: FakeSlack, adapter: SlackChannel) -> None:
    receipt = await adapter.send(route_dispatch())
    ts = receipt.message_id or ""
    [claim] = await signed_call(adapter, block_actions(channel=CHANNEL, user="U0SAM", user_name="sam", message_ts=ts,
                                                       value="hs_route1", action_id="handoff_claim", trigger_id="1.2.claim"))
    [release] = await signed_call(adapter, block_actions(channel=CHANNEL, user="U0SAM", user_name="sam", message_ts=ts,
                                                         value="hs_route1"))
    forged = block_actions(channel=CHANNEL, user="U0KIM", user_name="kim", message_ts=ts, value="hs_route1",
                           action_id="handoff_claim")
    refused = await adapter.handle_webhook(WebhookRequest(
        body=forged, headers=signed_headers("not-the-secret", forged, content_type=FORM), query={}, url=""))
    assert isinstance(claim, ClaimPress)
    assert isinstance(release, ReleasePress)
    assert claim.thread_key == release.thread_key == receipt.thread_key == f"{CHANNEL}:{ts}"
    assert (claim.author, claim.user_id, claim.dedupe_key) == ("Sam", "U0SAM", "action:1.2.claim")
    assert (release.author, release.user_id) == ("Sam", "U0SAM")
    assert (refused.status, refused.messages) == (401, [])


async def test_a_claimed_notice_takes_only_the_claim_button_away_and_is_posted(fake: FakeSlack, adapter: SlackChannel) -> None:
    receipt = await adapter.send(route_dispatch())
    notice = Notice(handoff_id="hs_route1", text="Sam has it: you claimed handoff UTE1.", about="claimed",
                    thread=receipt.thread, delivery_key="hd-claimed")
    await adapter.send(notice)
    await adapter.send(notice)  # a retry: the button is gone already, nothing more to edit
    [dispatch] = fake.top_level(CHANNEL)
    assert action_ids(dispatch) == ["handoff_form", "handoff_release"]
    assert len(fake.calls_to("chat.update")) == 1
    assert [section_texts(m, "mrkdwn") for m in fake.posts(CHANNEL, thread_ts=dispatch["ts"])] == [
        ["Sam has it: you claimed handoff UTE1."]] * 2


async def test_a_taken_notice_edits_the_dispatch_in_place_escaped_and_posts_nothing(fake: FakeSlack, adapter: SlackChannel) -> None:
    receipt = await adapter.send(route_dispatch())
    notice = Notice(handoff_id="hs_route1", text=TAKEN, about="taken", thread=receipt.thread, delivery_key="hd-taken")
    taken = await adapter.send(notice)
    await adapter.send(notice)  # a retry edits again, still one line
    [dispatch] = fake.top_level(CHANNEL)
    assert fake.posts(CHANNEL, thread_ts=dispatch["ts"]) == []
    assert (taken.message_id, taken.thread_key, taken.thread) == (dispatch["ts"], receipt.thread_key, receipt.thread)
    assert action_ids(dispatch) == []
    assert dispatch["blocks"][-1]["text"]["text"] == "Taken by Kim &lt;!here&gt; &amp; co at 14:02 in Telegram."
    assert [b.get("block_id") for b in dispatch["blocks"]].count("handoff_taken") == 1
    assert dispatch["text"] == fake.calls_to("chat.postMessage")[0].args["text"]  # the notification text stays
    assert section_texts(dispatch, "mrkdwn")[0].startswith("*Summary*")  # the brief stays


async def test_after_a_restart_a_taken_notice_finds_the_dispatch_in_its_thread(fake: FakeSlack) -> None:
    first = await standalone(fake)
    try:
        receipt = await first.send(route_dispatch())
    finally:
        await first.stop()
    again = await standalone(fake)
    try:
        await again.send(Notice(handoff_id="hs_route1", text=TAKEN, about="taken", thread=receipt.thread))
    finally:
        await again.stop()
    [dispatch] = fake.top_level(CHANNEL)
    assert (action_ids(dispatch), fake.posts(CHANNEL, thread_ts=dispatch["ts"])) == ([], [])
    assert dispatch["blocks"][-1]["block_id"] == "handoff_taken"


async def test_a_dispatch_that_cannot_be_edited_gets_the_taken_notice_in_its_thread(fake: FakeSlack, adapter: SlackChannel) -> None:
    receipt = await adapter.send(route_dispatch())
    fake.fail_next("chat.update", Fault(error="cant_update_message"))
    await adapter.send(Notice(handoff_id="hs_route1", text=TAKEN, about="taken", thread=receipt.thread))
    fake.fail_next("chat.update", Fault(status=429, error="ratelimited", headers={"Retry-After": "3"}))
    with pytest.raises(TransientChannelError):  # nothing posted: the core retries the notice
        await adapter.send(Notice(handoff_id="hs_route1", text=TAKEN, about="taken", thread=receipt.thread))
    [dispatch] = fake.top_level(CHANNEL)
    assert [section_texts(m, "mrkdwn") for m in fake.posts(CHANNEL, thread_ts=dispatch["ts"])] == [
        ["Taken by Kim &lt;!here&gt; &amp; co at 14:02 in Telegram."]]


async def test_every_event_names_the_slack_user_who_acted(fake: FakeSlack, adapter: SlackChannel) -> None:
    receipt = await adapter.send(route_dispatch())
    ts = receipt.message_id or ""
    [text] = await signed_call(adapter, message_event(channel=CHANNEL, text="on it", user="U0KIM", thread_ts=ts),
                               content_type="application/json")
    [decision] = await signed_call(adapter, block_actions(
        channel=CHANNEL, user="U0KIM", user_name="kim", message_ts=ts, value="ap_1", action_id="approval_approve",
        block_id="approval_actions"))
    assert isinstance(text, RecipientText)
    assert isinstance(decision, Decision)
    assert (text.user_id, text.author, decision.user_id, decision.author) == ("U0KIM", "Kim", "U0KIM", "Kim")
