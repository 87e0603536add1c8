"""Routes end to end through the real provider SDKs against the local fakes: a desk on a
manual clock with a Slack channel, a Telegram channel (webhook mode) and a WhatsApp number,
and a route that notifies Slack and Telegram first and the WhatsApp number next.

Everything of ours runs for real (HTTP API, webhook route, adapters, outbox, inbound dedup,
the claim and the ladder); only Slack, Telegram and Twilio are played by tests/fake_slack.py,
tests/fake_telegram.py and tests/fake_twilio.py, and every call into the desk is signed or
carries its secret as the provider's would.

The tests run on SQLite and, where the `database_url` fixture gives it, on PostgreSQL too:
the fakes do not depend on the database, so nothing is pinned.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from bot.runtime.clock import ManualClock
from tests.conftest import TELEGRAM_TOKEN, Harness, StartDesk
from tests.fake_slack import FakeSlack, Fault, block_actions, message_event, signed_headers
from tests.fake_telegram import KIM, STAFF_CHAT_ID, FakeTelegram
from tests.fake_twilio import ACCOUNT_SID, ANA_PHONE, AUTH_TOKEN, SENDER, FakeTwilio

SLACK, TELEGRAM, WHATSAPP, ROUTE = 3, 2, 6, 20
SLACK_TOKEN = "xoxb-test-token"
SLACK_SECRET = "slack-signing-secret-for-tests"
SLACK_CHANNEL = "C0HANDOFF"
TELEGRAM_SECRET = "test_webhook-secret-1"
FORM = "application/x-www-form-urlencoded"
PUBLIC_URL = "http://desk.test"
BRIEF = {
    "summary": "Ana's order #1234 is a week late and she wants a person to check it.",
    "expected_action": "Look up order #1234 and tell Ana when it will arrive.",
}
MONDAY_NOON = datetime(2026, 12, 7, 11, 0, tzinfo=UTC)
SUPPORT = {
    "id": ROUTE, "label": "Support", "public_name": "our support team", "estimated_response": "within 10 minutes",
    "steps": [{"notify": [SLACK, TELEGRAM], "claim_within": "5m"}, {"notify": [WHATSAPP], "claim_within": "10m"}],
}


# --------------------------------------------------------------------------- the providers


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    server = await FakeSlack(token=SLACK_TOKEN, channels=(SLACK_CHANNEL,), users={"U0SAM": "Sam", "U0KIM": "Kim"}).start()
    yield server
    await server.stop()


@dataclass
class Providers:
    """The three fakes, and the channel entries of a desk that uses them."""

    slack: FakeSlack
    telegram: FakeTelegram
    twilio: FakeTwilio

    def channels(self, *, status_callback: bool = False) -> list[dict[str, Any]]:
        return [
            {"id": SLACK, "kind": "slack", "label": "Slack support", "estimated_response": "within 5 minutes",
             "bot_token": SLACK_TOKEN, "signing_secret": SLACK_SECRET, "channel": SLACK_CHANNEL,
             "api_base_url": self.slack.url},
            {"id": TELEGRAM, "kind": "telegram", "label": "Telegram support", "estimated_response": "within 5 minutes",
             "bot_token": TELEGRAM_TOKEN, "chat_id": STAFF_CHAT_ID, "api_base_url": self.telegram.base_url,
             "mode": "webhook", "webhook_secret": TELEGRAM_SECRET},
            {"id": WHATSAPP, "kind": "whatsapp", "label": "On-call phone", "estimated_response": "within 15 minutes",
             "account_sid": ACCOUNT_SID, "auth_token": AUTH_TOKEN, "from": SENDER, "to": [ANA_PHONE],
             "api_base_url": self.twilio.base_url, "status_callback": status_callback},
        ]


@pytest.fixture
def providers(slack: FakeSlack, telegram: FakeTelegram, twilio: FakeTwilio) -> Providers:
    """Requested before start_desk, so the fakes outlive the desk."""
    return Providers(slack, telegram, twilio)


async def route_desk(start_desk: StartDesk, providers: Providers, route: dict[str, Any] | None = None, *,
                     status_callback: bool = False, **overrides: Any) -> Harness:
    return await start_desk(clock=ManualClock(MONDAY_NOON), channels=providers.channels(status_callback=status_callback),
                            routes=[route or SUPPORT], delivery={"base_backoff": "10ms", **overrides.pop("delivery", {})},
                            **overrides)


async def route_handoff(harness: Harness) -> tuple[str, dict[str, Any]]:
    """The agent hands the conversation off on the route; (conversation id, the tool's result)."""
    cid = await harness.conversation()
    started = await harness.tool(cid, "handoff_request", {"channel_id": ROUTE, **BRIEF})
    assert started.get("ok"), started
    return cid, started


async def subscriber_told(harness: Harness, cid: str) -> list[str]:
    return [m["text"] for m in await harness.messages(cid) if m["role"] == "agent"]


# --------------------------------------------------------------------------- each side, as its people see it


@dataclass
class SlackSide:
    """The route's Slack thread: what people there press and write, and what the channel shows."""

    harness: Harness
    fake: FakeSlack

    def dispatch(self) -> dict[str, Any]:
        [dispatch] = self.fake.top_level(SLACK_CHANNEL)
        return dispatch

    def buttons(self) -> list[str]:
        return [e["action_id"] for b in self.dispatch()["blocks"] if b["type"] == "actions" for e in b["elements"]]

    def shows_claim_button(self) -> bool:
        return "handoff_claim" in self.buttons()

    def taken_line(self) -> str | None:
        """The line the dispatch was edited to end with (by chat.update) once someone else took it."""
        dispatch = self.dispatch()
        updated = any(c.args.get("ts") == dispatch["ts"] for c in self.fake.calls_to("chat.update"))
        last = dispatch["blocks"][-1]
        return str(last["text"]["text"]) if updated and last.get("block_id") == "handoff_taken" else None

    def thread(self) -> list[str]:
        """The texts posted in the dispatch's thread (relays and notices), as Slack shows them."""
        return [json.dumps(m["blocks"]) + m["text"] for m in self.fake.posts(SLACK_CHANNEL, thread_ts=self.dispatch()["ts"])]

    async def signed(self, body: bytes, content_type: str) -> httpx.Response:
        headers = signed_headers(SLACK_SECRET, body, content_type=content_type)
        return await self.harness.client.post(f"/webhooks/{SLACK}", content=body, headers=headers)

    async def press_claim(self, user: str = "U0SAM") -> httpx.Response:
        ts = self.dispatch()["ts"]
        sid = self.dispatch()["metadata"]["event_payload"]["handoff"]
        return await self.signed(block_actions(channel=SLACK_CHANNEL, user=user, user_name=user.lower(), message_ts=ts,
                                               value=sid, action_id="handoff_claim"), FORM)

    async def reply(self, text: str, user: str = "U0SAM") -> httpx.Response:
        body = message_event(channel=SLACK_CHANNEL, text=text, user=user, thread_ts=self.dispatch()["ts"])
        return await self.signed(body, "application/json")


@dataclass
class TelegramSide:
    """The route's Telegram dispatch in the staff group, and the replies to it."""

    harness: Harness
    fake: FakeTelegram

    def dispatch(self) -> dict[str, Any]:
        return self.fake.sent_to(STAFF_CHAT_ID)[0]

    def buttons(self) -> list[str]:
        return [b.get("callback_data", b["text"]) for row in self.dispatch().get("reply_markup", {}).get("inline_keyboard", [])
                for b in row]

    def shows_claim_button(self) -> bool:
        return "claim" in self.buttons()

    def taken_line(self) -> str | None:
        """The line the dispatch was edited to end with (by editMessageText) once someone else took it."""
        edits = [e for e in self.fake.requests("editMessageText") if e["message_id"] == self.dispatch()["message_id"]]
        return str(self.dispatch()["text"]).rsplit("\n\n", 1)[-1] if edits else None

    def thread(self) -> list[str]:
        dispatch_id = self.dispatch()["message_id"]
        return [str(m["text"]) for m in self.fake.sent_to(STAFF_CHAT_ID)
                if m.get("reply_to_message", {}).get("message_id") == dispatch_id]

    async def post(self, update: dict[str, Any]) -> httpx.Response:
        return await self.harness.client.post(f"/webhooks/{TELEGRAM}", json=update,
                                              headers={"X-Telegram-Bot-Api-Secret-Token": TELEGRAM_SECRET})

    async def press_claim(self, user: dict[str, Any] = KIM) -> httpx.Response:
        return await self.post(self.fake.callback_update(self.dispatch()["message_id"], user=user, data="claim"))

    async def reply(self, text: str, user: dict[str, Any] = KIM) -> httpx.Response:
        return await self.post(self.fake.message_update(text, user=user, reply_to=self.dispatch()["message_id"]))


def sides(harness: Harness, providers: Providers) -> tuple[SlackSide, TelegramSide]:
    return SlackSide(harness, providers.slack), TelegramSide(harness, providers.telegram)


# --------------------------------------------------------------------------- two claims racing


@pytest.mark.parametrize("slack_first", [True, False], ids=["slack_pressed_first", "telegram_pressed_first"])
async def test_two_claim_presses_racing_from_slack_and_telegram_one_wins_the_other_dispatch_says_who(
    start_desk: StartDesk, providers: Providers, slack_first: bool,
) -> None:
    """Which press wins is the race's to decide; both orders of starting them are run, so
    either side ends up the winner and the loser's edit is checked on both providers."""
    harness = await route_desk(start_desk, providers)
    cid, started = await route_handoff(harness)
    sid = started["handoff_session_id"]
    await harness.desk.settle()
    # the answer comes once one channel is reached; the other may still be on its way
    assert sorted(started["channels_notified"] + started["channels_pending"]) == [TELEGRAM, SLACK]
    assert started["channels_failed"] == []
    recipients = (await harness.handoff(sid))["recipients"]
    assert sorted((r["channel_id"], r["state"]) for r in recipients) == [(TELEGRAM, "notified"), (SLACK, "notified")]
    on_slack, on_telegram = sides(harness, providers)
    assert on_slack.shows_claim_button() and on_telegram.shows_claim_button()

    presses = [on_slack.press_claim(user="U0SAM"), on_telegram.press_claim(user=KIM)]
    pressed = await asyncio.gather(*(presses if slack_first else presses[::-1]))
    assert [r.status_code for r in pressed] == [200, 200]
    await harness.desk.settle()

    handoff = await harness.handoff(sid)
    assert handoff["claimed_by"] in ("Sam", "Kim")
    winner, loser = (on_slack, on_telegram) if handoff["claimed_by"] == "Sam" else (on_telegram, on_slack)
    assert handoff["claimed_via"] == f"channel:{SLACK if winner is on_slack else TELEGRAM}"
    kinds = await harness.kinds(sid)
    assert kinds.count("handoff_claimed") == 1 and kinds.count("claim_noop") == 1
    winner_name = handoff["claimed_by"]
    winner_label = "Slack support" if winner is on_slack else "Telegram support"

    # the loser's dispatch was edited in place to say who took it, its buttons gone
    assert f"was taken by {winner_name} ({winner_label}) at 11:00 UTC" in (loser.taken_line() or "not edited")
    assert loser.buttons() == []
    assert not any("was taken by" in t for t in loser.thread())  # edited in place, not posted beside it
    loser_heard = loser.thread()  # (what the losing press itself was told: see the test of a late press below)
    # the winner keeps its dispatch, without the Claim button
    assert not winner.shows_claim_button() and winner.buttons() != []
    assert winner.taken_line() is None
    assert winner.thread() and f"{winner_name} has it. The subscriber's messages now come only to this thread." in winner.thread()[-1]
    assert (await subscriber_told(harness, cid))[-1] == f"{winner_name} from our support team has joined the conversation."

    # the subscriber's next message reaches the winner's thread only
    await harness.say(cid, "Is anyone looking at my order?")
    await harness.desk.settle()
    assert "Is anyone looking at my order?" in winner.thread()[-1]
    assert loser.thread() == loser_heard

    # the one who lost writes in their thread: it does not reach the subscriber; the thread is told whose it is
    late = await loser.reply("I can take it too")
    assert late.status_code == 200
    await harness.desk.settle()
    assert not any(text == "I can take it too" for _, text in await harness.human_texts(cid))
    [not_yours] = loser.thread()[len(loser_heard):]
    assert f"is {winner_name}'s; what you wrote here did not reach the subscriber" in not_yours
    assert "not_relayed" in await harness.kinds(sid)


async def test_a_reply_in_the_slack_thread_claims_and_the_telegram_dispatch_is_edited_to_taken(
    start_desk: StartDesk, providers: Providers,
) -> None:
    harness = await route_desk(start_desk, providers)
    cid, started = await route_handoff(harness)
    sid = started["handoff_session_id"]
    await harness.desk.settle()
    on_slack, on_telegram = sides(harness, providers)

    assert (await on_slack.reply("Hi Ana, Kim here, looking at it.", user="U0KIM")).status_code == 200
    await harness.desk.settle()

    handoff = await harness.handoff(sid)
    assert (handoff["claimed_by"], handoff["claimed_via"], handoff["channel_id"]) == ("Kim", f"channel:{SLACK}", SLACK)
    assert ("Kim", "Hi Ana, Kim here, looking at it.") in await harness.human_texts(cid)  # the claiming reply is relayed
    assert on_telegram.taken_line() == f"Handoff {handoff['short_code']} was taken by Kim (Slack support) at 11:00 UTC. " \
        "Nothing more to do here."
    assert on_telegram.buttons() == []
    assert [e["message_id"] for e in providers.telegram.requests("editMessageText")] == [on_telegram.dispatch()["message_id"]]
    assert not on_slack.shows_claim_button()
    assert (await harness.kinds(sid)).count("handoff_claimed") == 1


async def test_a_losing_claim_press_is_not_told_that_something_it_wrote_was_dropped(
    start_desk: StartDesk, providers: Providers,
) -> None:
    harness = await route_desk(start_desk, providers)
    _, started = await route_handoff(harness)
    await harness.desk.settle()
    on_slack, on_telegram = sides(harness, providers)
    assert (await on_slack.press_claim(user="U0SAM")).status_code == 200
    await harness.desk.settle()
    assert (await on_telegram.press_claim(user=KIM)).status_code == 200  # a moment too late
    await harness.desk.settle()
    assert (await harness.handoff(started["handoff_session_id"]))["claimed_by"] == "Sam"
    assert on_telegram.taken_line() is not None  # told who has it, by the edit
    assert not any("what you wrote here" in t for t in on_telegram.thread())


# --------------------------------------------------------------------------- fallback


@pytest.mark.parametrize("fault", [
    Fault(status=500, text="<html>500 Internal Server Error</html>"),
    Fault(error="not_in_channel"),
], ids=["server_error_past_the_dispatch_budget", "not_in_channel"])
async def test_a_slack_step_that_fails_falls_back_to_whatsapp_at_once(
    start_desk: StartDesk, providers: Providers, fault: Fault,
) -> None:
    route = {**SUPPORT, "steps": [{"notify": [SLACK], "claim_within": "5m"}, {"notify": [WHATSAPP], "claim_within": "10m"}]}
    harness = await route_desk(start_desk, providers, route, handoff={"dispatch_timeout": "1s"}, delivery={"base_backoff": "2s"})
    providers.slack.fail_next("chat.postMessage", fault, fault, fault)

    _, started = await route_handoff(harness)

    assert started["human_notified"] is True
    assert (started["channels_notified"], started["channels_failed"]) == ([WHATSAPP], [SLACK])
    [brief] = providers.twilio.sent_to(ANA_PHONE)  # at once: nothing waited out claim_within
    assert BRIEF["summary"] in brief["body"]
    assert providers.slack.top_level(SLACK_CHANNEL) == []
    handoff = await harness.handoff(started["handoff_session_id"])
    assert (handoff["step"], handoff["channel_id"]) == (1, WHATSAPP)
    assert "recipient_failed" in await harness.kinds(started["handoff_session_id"])


async def test_whatsapp_reporting_63016_after_accepting_moves_the_ladder_on_at_once(
    start_desk: StartDesk, providers: Providers,
) -> None:
    route = {**SUPPORT, "steps": [{"notify": [WHATSAPP], "claim_within": "30m"}, {"notify": [TELEGRAM], "claim_within": "10m"}]}
    harness = await route_desk(start_desk, providers, route, status_callback=True)
    _, started = await route_handoff(harness)
    sid = started["handoff_session_id"]
    await harness.desk.settle()
    assert started["channels_notified"] == [WHATSAPP]
    [accepted] = providers.twilio.sent_to(ANA_PHONE)
    assert accepted["status_callback"] == f"{PUBLIC_URL}/webhooks/{WHATSAPP}"
    assert providers.telegram.sent_to(STAFF_CHAT_ID) == []

    status = {"MessageSid": accepted["sid"], "MessageStatus": "undelivered", "ErrorCode": "63016", "AccountSid": ACCOUNT_SID,
              "From": SENDER, "To": ANA_PHONE, "ApiVersion": "2010-04-01"}
    body, headers = providers.twilio.signed(f"{PUBLIC_URL}/webhooks/{WHATSAPP}", status)
    assert (await harness.client.post(f"/webhooks/{WHATSAPP}", content=body, headers=headers)).status_code == 200
    await harness.desk.settle()
    harness.desk.clock.advance(timedelta(seconds=1))  # type: ignore[attr-defined]  # a ManualClock
    await harness.desk.timers.sweep()
    await harness.desk.settle()

    [dispatch] = providers.telegram.sent_to(STAFF_CHAT_ID)
    assert BRIEF["summary"] in dispatch["text"]
    handoff = await harness.handoff(sid)
    assert (handoff["step"], handoff["claimed_at"]) == (1, None)
    kinds = await harness.kinds(sid)
    assert "delivery_failed_after_acceptance" in kinds and kinds.count("handoff_escalated") == 1
