"""The channel contract: what every provider adapter does the same way, one suite over
every provider fake.

Each scenario runs the whole desk (HTTP API, outbox, inbound dedup, state machine) against
the real SDK of each provider talking to its fake server under tests/. What differs
between providers (how a person replies, how a fault is scripted, where a relay lands) is
one small driver class per provider below; the scenarios themselves are written once.
Provider quirks (markup, signatures, limits, buttons' look) stay in tests/test_channel_<kind>.py.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from email.message import EmailMessage
from email.utils import make_msgid
from typing import Any, ClassVar

import aiosmtplib
import pytest
from sqlalchemy import select

from bot.store.models import InboundEvent
from channels.base import Notice, ReleasePress, stored_inbound
from channels.email import EmailChannel
from tests.conftest import Harness, StartDesk
from tests.fake_discord import BOT_USER as DISCORD_BOT
from tests.fake_discord import KIM as DISCORD_KIM
from tests.fake_discord import SAM as DISCORD_SAM
from tests.fake_discord import STAFF_CHANNEL, FakeDiscord
from tests.fake_discord import Fault as DiscordFault
from tests.fake_slack import FakeSlack, block_actions, message_event, signed_headers
from tests.fake_slack import Fault as SlackFault
from tests.fake_smtp import FakeSMTP, Received
from tests.fake_telegram import KIM as TELEGRAM_KIM
from tests.fake_telegram import STAFF_CHAT_ID, FakeTelegram
from tests.fake_twilio import ACCOUNT_SID, ANA_PHONE, AUTH_TOKEN, FakeTwilio

CHANNEL_ID = 7
RETRY_AFTER = 7


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    """The contract does not depend on the database: SQLite only."""
    return sqlite_url


class Provider:
    """Drives one provider's fake the way its people and its servers behave.

    `dispatch` is whatever identifies the handoff's dispatch at the provider (a message, a
    mail); `reply` returns the delivery of one person's message so a scenario can send it
    again. A class flag says which scenarios apply to a provider."""

    kind: ClassVar[str]
    person: ClassVar[str]  # the name the desk gives the person who replies
    person_id: ClassVar[str | None]  # the provider's own id of that person (None: the provider says none)
    presser_id: ClassVar[str | None] = None  # the provider's id of who presses Release
    rate_limits: ClassVar[bool] = True  # the provider answers "slow down, retry after N seconds"
    has_token: ClassVar[bool] = True  # a credential the provider can refuse
    release_button: ClassVar[bool] = False
    bad_credentials: ClassVar[dict[str, Any]] = {}
    refused_problem: ClassVar[str] = ""  # how /healthz starts to explain refused credentials
    leaked: ClassVar[str] = ""  # a part of the refused credential that must never be shown

    fake: Any = None

    def new_fake(self) -> Any:
        """The provider's fake server, not started yet (None: the desk is its own provider)."""
        return None

    async def open(self) -> None:
        """Start the fake server (before the desk, so it outlives it)."""
        fake = self.new_fake()
        self.fake = None if fake is None else await fake.start()

    async def close(self) -> None:
        if self.fake is not None:
            await self.fake.stop()

    def entry(self, **overrides: Any) -> dict[str, Any]:
        raise NotImplementedError

    def timeout_override(self, seconds: float) -> dict[str, Any]:
        return {"request_timeout": seconds}

    async def dispatch_of(self, h: Harness, sid: str) -> Any:
        raise NotImplementedError

    async def reply(self, h: Harness, dispatch: Any, text: str) -> Any:
        """A person writes `text` in the handoff's thread; returns the delivery (for `redeliver`)."""
        raise NotImplementedError

    async def redeliver(self, h: Harness, delivery: Any, attempt: int) -> None:
        """The provider sends the same delivery again (it did not see our answer in time);
        `attempt` counts the retries, from 1."""
        raise NotImplementedError

    def thread_texts(self, dispatch: Any) -> list[str]:
        """What the desk posted in the handoff's thread after the dispatch, as raw text."""
        raise NotImplementedError

    def sends(self) -> int:
        """How many send requests reached the provider, accepted or refused."""
        raise NotImplementedError

    def rate_limit_next_send(self, seconds: int) -> None:
        raise NotImplementedError

    def lose_next_answer(self) -> None:
        """The provider gets the next message but its answer never comes."""
        raise NotImplementedError

    def answer_again(self) -> None:
        """Undo `lose_next_answer` (for fakes that hold until released)."""

    async def press_release(self, h: Harness, dispatch: Any, sid: str) -> None:
        raise NotImplementedError


class Telegram(Provider):
    kind, person, person_id = "telegram", "Sam Lee", "501"
    release_button, presser_id = True, str(TELEGRAM_KIM["id"])
    token = "123456:TEST-token_abcdefghijklmnop"
    secret = "test_webhook-secret-1"
    bad_credentials = {"bot_token": "123456:WRONG-token_zyxwvutsrqponm"}
    refused_problem, leaked = "Telegram refused bot_token (401/404)", "WRONG"

    def new_fake(self) -> Any:
        return FakeTelegram(token=self.token)

    def entry(self, **overrides: Any) -> dict[str, Any]:
        return {"kind": "telegram", "bot_token": self.token, "chat_id": STAFF_CHAT_ID,
                "api_base_url": self.fake.base_url, "webhook_secret": self.secret, **overrides}

    async def _post(self, h: Harness, update: dict[str, Any]) -> None:
        response = await h.client.post(f"/webhooks/{CHANNEL_ID}", json=update,
                                       headers={"X-Telegram-Bot-Api-Secret-Token": self.secret})
        assert response.status_code == 200, response.text
        await h.desk.settle()

    async def dispatch_of(self, h: Harness, sid: str) -> Any:
        message_id = (await h.handoff(sid))["channel_message_id"]
        return next(m for m in self.fake.sent() if str(m["message_id"]) == message_id)

    async def reply(self, h: Harness, dispatch: Any, text: str) -> Any:
        update = self.fake.message_update(text, reply_to=dispatch["message_id"])
        await self._post(h, update)
        return update

    async def redeliver(self, h: Harness, delivery: Any, attempt: int) -> None:
        await self._post(h, delivery)

    def thread_texts(self, dispatch: Any) -> list[str]:
        return [m["text"] for m in self.fake.sent()
                if m.get("reply_to_message", {}).get("message_id") == dispatch["message_id"]]

    def sends(self) -> int:
        return len(self.fake.requests("sendMessage"))

    def rate_limit_next_send(self, seconds: int) -> None:
        self.fake.fail("sendMessage", 429, f"Too Many Requests: retry after {seconds}", retry_after=seconds)

    def lose_next_answer(self) -> None:
        self.fake.hold("sendMessage")

    def answer_again(self) -> None:
        self.fake.release()

    async def press_release(self, h: Harness, dispatch: Any, sid: str) -> None:
        await self._post(h, self.fake.callback_update(dispatch["message_id"], user=TELEGRAM_KIM))


class Slack(Provider):
    kind, person, person_id, presser_id = "slack", "Sam", "U0SAM", "U0KIM"
    release_button = True
    token, signing_secret, channel = "xoxb-test-token", "slack-signing-secret-for-tests", "C0HANDOFF"
    bad_credentials = {"bot_token": "xoxb-revoked-0000"}
    refused_problem, leaked = "Slack refused the bot token (invalid_auth)", "xoxb-revoked-0000"

    def new_fake(self) -> Any:
        return FakeSlack(token=self.token, channels=(self.channel,), users={"U0SAM": "Sam", "U0KIM": "Kim"})

    def entry(self, **overrides: Any) -> dict[str, Any]:
        return {"kind": "slack", "bot_token": self.token, "signing_secret": self.signing_secret, "channel": self.channel,
                "api_base_url": self.fake.url, **overrides}

    async def _post(self, h: Harness, body: bytes, *, content_type: str = "application/json", **signing: Any) -> None:
        headers = signed_headers(self.signing_secret, body, content_type=content_type, **signing)
        response = await h.client.post(f"/webhooks/{CHANNEL_ID}", content=body, headers=headers)
        assert response.status_code == 200, response.text
        await h.desk.settle()

    async def dispatch_of(self, h: Harness, sid: str) -> Any:
        return next(m for m in self.fake.top_level(self.channel) if m["metadata"]["event_payload"]["handoff"] == sid)

    async def reply(self, h: Harness, dispatch: Any, text: str) -> Any:
        body = message_event(channel=self.channel, text=text, user="U0SAM", thread_ts=dispatch["ts"])
        await self._post(h, body)
        return body

    async def redeliver(self, h: Harness, delivery: Any, attempt: int) -> None:
        await self._post(h, delivery, retry_num=attempt)  # Slack numbers its retries

    def thread_texts(self, dispatch: Any) -> list[str]:
        return [json.dumps(m, ensure_ascii=False) for m in self.fake.posts(self.channel, thread_ts=dispatch["ts"])]

    def sends(self) -> int:
        return len(self.fake.calls_to("chat.postMessage"))

    def rate_limit_next_send(self, seconds: int) -> None:
        self.fake.fail_next("chat.postMessage", SlackFault(status=429, error="ratelimited", headers={"Retry-After": str(seconds)}))

    def lose_next_answer(self) -> None:
        self.fake.fail_next("chat.postMessage", SlackFault(lose_answer=True))

    async def press_release(self, h: Harness, dispatch: Any, sid: str) -> None:
        body = block_actions(channel=self.channel, user="U0KIM", user_name="kim", message_ts=dispatch["ts"], value=sid)
        await self._post(h, body, content_type="application/x-www-form-urlencoded")


class Discord(Provider):
    kind, person, person_id, presser_id = "discord", "Sam", DISCORD_SAM["id"], DISCORD_KIM["id"]
    release_button = True
    token = "MTAwMDAwMDAwMDAwMDAwMDAw.GfAkE1.discord-bot-token-for-tests"
    messages_route = "POST /channels/{id}/messages"
    bad_credentials = {"bot_token": "MTAwMDAwMDAwMDAwMDAwMDAw.revoked.token-0000"}
    refused_problem, leaked = f"Discord refused bot_token of channel {CHANNEL_ID} (401 Unauthorized)", "revoked"

    def new_fake(self) -> Any:
        return FakeDiscord(token=self.token)

    def entry(self, **overrides: Any) -> dict[str, Any]:
        return {"kind": "discord", "bot_token": self.token, "channel_id": STAFF_CHANNEL,
                "application_public_key": self.fake.public_key, "api_base_url": self.fake.api_url,
                "gateway_url": self.fake.gateway_url, **overrides}

    async def _stored(self, h: Harness, count: int) -> None:
        """Gateway messages arrive on their own schedule: wait until `count` are stored and handled."""
        async with asyncio.timeout(5):
            while await h.stored_events() < count:
                await asyncio.sleep(0.005)
        await h.desk.settle()

    async def dispatch_of(self, h: Harness, sid: str) -> Any:
        message_id = (await h.handoff(sid))["channel_message_id"]
        await self.fake.wait_for(lambda: any(e["t"] == "THREAD_CREATE" for e in self.fake.dispatched))
        return next(m for m in self.fake.posts(STAFF_CHANNEL) if m["id"] == message_id)

    async def reply(self, h: Harness, dispatch: Any, text: str) -> Any:
        before = await h.stored_events()
        message = await self.fake.human_message(dispatch["id"], text)
        await self._stored(h, before + 1)
        return message

    async def redeliver(self, h: Harness, delivery: Any, attempt: int) -> None:
        await self.fake._dispatch("MESSAGE_CREATE", delivery)  # as a gateway RESUME replays it
        await h.desk.settle()

    def thread_texts(self, dispatch: Any) -> list[str]:
        return [m["content"] for m in self.fake.posts(dispatch["id"]) if m["author"]["id"] == DISCORD_BOT["id"]]

    def sends(self) -> int:
        return len(self.fake.calls_to(self.messages_route))

    def rate_limit_next_send(self, seconds: int) -> None:
        self.fake.fail_next(self.messages_route, DiscordFault(
            429, {"message": "You are being rate limited.", "retry_after": float(seconds), "global": False},
            {"Retry-After": str(seconds), "Via": "1.1 google"}))

    def lose_next_answer(self) -> None:
        self.fake.fail_next(self.messages_route, DiscordFault(lose_answer=True))

    async def press_release(self, h: Harness, dispatch: Any, sid: str) -> None:
        body, headers = self.fake.signed(self.fake.button_click(dispatch, f"handoff_release:{sid}", user=DISCORD_KIM))
        response = await h.client.post(f"/webhooks/{CHANNEL_ID}", content=body, headers=headers)
        assert response.status_code == 200, response.text
        await h.desk.settle()


class HoldingFake:
    """For fakes whose hold() stores the next messages and answers none until release()."""

    fake: Any = None

    def lose_next_answer(self) -> None:
        self.fake.hold()

    def answer_again(self) -> None:
        self.fake.release()


class WhatsApp(HoldingFake, Provider):
    """One number on the line: the contract is about one handoff's thread, not fan-out."""

    kind, person, person_id = "whatsapp", "Sam", ANA_PHONE
    bad_credentials = {"auth_token": "9" * 32}
    refused_problem = f"Twilio refused account_sid/auth_token of channel {CHANNEL_ID} (20003)"
    leaked = "9" * 32
    webhook_url = f"http://desk.test/webhooks/{CHANNEL_ID}"

    def new_fake(self) -> Any:
        return FakeTwilio()

    def entry(self, **overrides: Any) -> dict[str, Any]:
        return {"kind": "whatsapp", "account_sid": ACCOUNT_SID, "auth_token": AUTH_TOKEN, "from": "+1 415 523 8886",
                "to": [ANA_PHONE], "api_base_url": self.fake.base_url, **overrides}

    async def _post(self, h: Harness, delivery: tuple[bytes, dict[str, str]]) -> None:
        body, headers = delivery
        response = await h.client.post(f"/webhooks/{CHANNEL_ID}", content=body, headers=headers)
        assert response.status_code == 200, response.text
        await h.desk.settle()

    async def dispatch_of(self, h: Harness, sid: str) -> Any:
        return (await h.handoff(sid))["short_code"]  # a shared line: the short code is the thread

    async def reply(self, h: Harness, dispatch: Any, text: str) -> Any:
        delivery = self.fake.inbound(self.webhook_url, body=text)
        await self._post(h, delivery)
        return delivery

    async def redeliver(self, h: Harness, delivery: Any, attempt: int) -> None:
        await self._post(h, delivery)

    def thread_texts(self, dispatch: Any) -> list[str]:
        return [m["body"] for m in self.fake.sent_to(ANA_PHONE)[1:] if dispatch in m["body"]]

    def sends(self) -> int:
        return len(self.fake.requests())

    def rate_limit_next_send(self, seconds: int) -> None:
        self.fake.fail(429, 20429, "Too Many Requests", retry_after=seconds)


class Email(HoldingFake, Provider):
    kind, person, person_id = "email", "Sam Lee", "team@example.com"
    rate_limits = False  # SMTP has no retry-after; its 4xx are covered in test_channel_email.py
    team, desk_address, password = "team@example.com", "desk@example.com", "s3cret-pass"
    bad_credentials = {"smtp": {"host": "127.0.0.1", "port": 0, "security": "none", "username": "desk",
                                "password": "WRONG-pass"}}
    refused_problem = "the SMTP server refused smtp.username / smtp.password (535"
    leaked = "WRONG-pass"

    def new_fake(self) -> Any:
        return FakeSMTP(username="desk", password=self.password)

    async def open(self) -> None:
        await super().open()
        self.bad_credentials = {"smtp": {**self.bad_credentials["smtp"], "port": self.fake.port}}

    def smtp(self, **overrides: Any) -> dict[str, Any]:
        return {"host": "127.0.0.1", "port": self.fake.port, "security": "none", "username": "desk",
                "password": self.password, "timeout": 5, **overrides}

    def entry(self, **overrides: Any) -> dict[str, Any]:
        return {"kind": "email", "to": [self.team], "from": self.desk_address, "smtp": self.smtp(),
                "inbound": {"host": "127.0.0.1", "port": 0, "address": self.desk_address},
                "reply_token_secret": "reply-token-secret-for-tests", **overrides}

    def timeout_override(self, seconds: float) -> dict[str, Any]:
        return {"smtp": self.smtp(timeout=seconds)}

    async def dispatch_of(self, h: Harness, sid: str) -> Any:
        message_id = (await h.handoff(sid))["channel_message_id"]
        return next(m for m in self.fake.messages if m.message["Message-ID"] == message_id)

    async def _mail_in(self, h: Harness, message: EmailMessage) -> None:
        adapter = h.desk.channels.get(CHANNEL_ID)
        assert isinstance(adapter, EmailChannel)
        async with aiosmtplib.SMTP(hostname="127.0.0.1", port=adapter.inbound_port, timeout=10,
                                   local_hostname="mx.example.com") as client:
            await client.sendmail(self.team, [message["To"].addresses[0].addr_spec], message.as_bytes())
        await h.desk.settle()

    async def reply(self, h: Harness, dispatch: Any, text: str) -> Any:
        original: Received = dispatch
        message = EmailMessage()
        message["From"] = f"Sam Lee <{self.team}>"
        message["To"] = str(original.message["Reply-To"])
        message["Subject"] = "Re: " + str(original.message["Subject"])
        message["Message-ID"] = make_msgid(domain="example.com")
        message["In-Reply-To"] = message["References"] = original.message["Message-ID"]
        message.set_content(text)
        await self._mail_in(h, message)
        return message

    async def redeliver(self, h: Harness, delivery: Any, attempt: int) -> None:
        await self._mail_in(h, delivery)

    def thread_texts(self, dispatch: Any) -> list[str]:
        return [m.part("text/plain") for m in self.fake.messages
                if m.message["In-Reply-To"] == dispatch.message["Message-ID"]]

    def sends(self) -> int:
        return len(self.fake.messages)


class OwnerInbox(Provider):
    """The built-in inbox: the desk is its own provider; a double submit is its redelivery."""

    kind, person, person_id = "owner_inbox", "Support", None
    rate_limits = has_token = False

    def entry(self, **overrides: Any) -> dict[str, Any]:
        return {"kind": "owner_inbox", **overrides}

    async def dispatch_of(self, h: Harness, sid: str) -> Any:
        return sid

    async def reply(self, h: Harness, dispatch: Any, text: str) -> Any:
        page = (await h.client.get(f"/inbox/handoffs/{dispatch}")).text
        form = {"csrf": _form_value(page, "csrf"), "nonce": _form_value(page, "nonce"), "text": text}
        await self._submit(h, dispatch, form)
        return dispatch, form

    async def redeliver(self, h: Harness, delivery: Any, attempt: int) -> None:
        await self._submit(h, *delivery)

    async def _submit(self, h: Harness, sid: str, form: dict[str, str]) -> None:
        response = await h.client.post(f"/inbox/handoffs/{sid}/reply", data=form)
        assert response.status_code == 303, response.text
        await h.desk.settle()

    def thread_texts(self, dispatch: Any) -> list[str]:
        return []  # the inbox shows the conversation itself: nothing is posted to a thread


def _form_value(html: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]+)"', html)
    assert match, f"no {name} in the page"
    return match.group(1)


EXTERNAL: list[type[Provider]] = [Telegram, Slack, Discord, WhatsApp, Email]
EVERY: list[type[Provider]] = [*EXTERNAL, OwnerInbox]


def providers(kinds: list[type[Provider]]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("provider", kinds, ids=[k.kind for k in kinds], indirect=True)


@pytest.fixture
async def provider(request: pytest.FixtureRequest) -> AsyncIterator[Provider]:
    """Requested before start_desk, so the fake outlives the desk."""
    driver: Provider = request.param()
    await driver.open()
    yield driver
    await driver.close()


async def start(start_desk: StartDesk, provider: Provider, **channel: Any) -> Harness:
    entry = {"id": CHANNEL_ID, "label": f"Contract ({provider.kind})", "estimated_response": "within the hour",
             **provider.entry(**channel)}
    return await start_desk(channels=[entry], delivery={"base_backoff": "10ms"})




async def handoff_on(h: Harness, provider: Provider) -> tuple[str, str, Any]:
    """A conversation with a handoff dispatched to the provider: (conversation, handoff, dispatch)."""
    cid = await h.conversation()
    result = await h.start_handoff(cid, channel_id=CHANNEL_ID)
    sid = result["handoff_session_id"]
    return cid, sid, await provider.dispatch_of(h, sid)


async def retries(h: Harness, sid: str) -> list[dict[str, Any]]:
    return [e["detail"] for e in await h.events(sid) if e["kind"] == "delivery_retry_scheduled"]


# --------------------------------------------------------------------------- dispatch and both directions


@providers(EVERY)
async def test_a_dispatch_opens_a_thread_that_carries_messages_both_ways(start_desk: StartDesk, provider: Provider) -> None:
    h = await start(start_desk, provider)
    cid = await h.conversation()
    result = await h.start_handoff(cid, channel_id=CHANNEL_ID)
    assert result["human_notified"] is True
    assert result["channel_kind"] == provider.kind
    sid = result["handoff_session_id"]
    handoff = await h.handoff(sid)
    assert handoff["state"] == "active"
    assert (await h.desk.handoffs.get(sid)).thread_key
    dispatch = await provider.dispatch_of(h, sid)

    await h.say(cid, "Hello? Anyone there?")
    await h.desk.settle()
    if provider.kind != "owner_inbox":
        [relay] = provider.thread_texts(dispatch)
        assert "Hello? Anyone there?" in relay

    await provider.reply(h, dispatch, "Hi Ana, I'm on it.")
    [human] = [m for m in await h.messages(cid) if m["role"] == "human"]
    assert human["text"] == "Hi Ana, I'm on it."
    assert human["author"] == provider.person
    assert human["handoff_session_id"] == sid
    assert "relayed_to_subscriber" in await h.kinds(sid)


@providers(EVERY)
async def test_a_reply_names_who_wrote_by_the_provider_s_own_id(start_desk: StartDesk, provider: Provider) -> None:
    """The id the verified call carries (never the display name), so two people with one
    name stay two people."""
    h = await start(start_desk, provider)
    _cid, _sid, dispatch = await handoff_on(h, provider)
    await provider.reply(h, dispatch, "On it.")
    async with h.desk.db.read() as session:
        [event] = (await session.scalars(select(InboundEvent))).all()
    reply = stored_inbound(event.payload)
    assert (reply.kind, reply.author, reply.user_id) == ("recipient_text", provider.person, provider.person_id)


@providers([WhatsApp, Email, OwnerInbox])
async def test_where_the_provider_cannot_edit_every_notice_about_a_claim_is_said_in_the_thread(
    start_desk: StartDesk, provider: Provider,
) -> None:
    h = await start(start_desk, provider)
    _cid, sid, dispatch = await handoff_on(h, provider)
    adapter, session = h.desk.channels.get(CHANNEL_ID), await h.desk.handoffs.get(sid)
    assert adapter is not None
    assert adapter.capabilities.edits is False
    code = (await h.handoff(sid))["short_code"]
    texts = {about: f"Handoff {code}: the notice about {about}." for about in ("claimed", "taken", "reminder", "not_yours")}
    for about, text in texts.items():
        receipt = await adapter.send(Notice(handoff_id=sid, text=text, about=about, thread=session.thread))
        assert receipt.thread_key == session.thread_key
    if provider.kind != "owner_inbox":  # the inbox shows the handoff itself: a notice has nowhere to go
        said = provider.thread_texts(dispatch)
        assert all(any(text in posted for posted in said) for text in texts.values()), said


@providers(EVERY)
async def test_a_redelivered_reply_is_relayed_once(start_desk: StartDesk, provider: Provider) -> None:
    h = await start(start_desk, provider)
    cid, _sid, dispatch = await handoff_on(h, provider)
    before = await h.stored_events()
    delivery = await provider.reply(h, dispatch, "Only once, please.")
    for attempt in (1, 2):
        await provider.redeliver(h, delivery, attempt)
    await provider.reply(h, dispatch, "And this one next.")  # arrives after the redelivery was handled
    assert await h.human_texts(cid) == [(provider.person, "Only once, please."), (provider.person, "And this one next.")]
    assert await h.stored_events() == before + 2


# --------------------------------------------------------------------------- provider failures


@providers([p for p in EXTERNAL if p.rate_limits])
async def test_a_rate_limited_relay_waits_as_long_as_the_provider_asks_then_goes_out_once(
    start_desk: StartDesk, provider: Provider,
) -> None:
    h = await start(start_desk, provider)
    cid, sid, dispatch = await handoff_on(h, provider)
    sends = provider.sends()
    provider.rate_limit_next_send(RETRY_AFTER)
    await h.say(cid, "Is anyone there?")
    await h.desk.settle()
    [retry] = await retries(h, sid)
    assert retry["error_type"] == "TransientChannelError"
    assert retry["retry_in_seconds"] == float(RETRY_AFTER)
    assert provider.thread_texts(dispatch) == []

    h.desk.clock.advance(timedelta(seconds=RETRY_AFTER - 1))
    await h.desk.settle()
    assert provider.thread_texts(dispatch) == []  # still inside the provider's wait
    h.desk.clock.advance(timedelta(seconds=2))
    await h.desk.settle()
    [relay] = provider.thread_texts(dispatch)
    assert "Is anyone there?" in relay
    assert provider.sends() == sends + 2  # the refused attempt, then the relay


@providers(EXTERNAL)
async def test_a_send_whose_answer_never_comes_is_reported_as_uncertain(start_desk: StartDesk, provider: Provider) -> None:
    h = await start(start_desk, provider, **provider.timeout_override(2.0))  # long enough to start and reach a fake on a busy machine
    cid, sid, _dispatch = await handoff_on(h, provider)
    sends = provider.sends()
    provider.lose_next_answer()
    try:
        await h.say(cid, "Did you get this?")
        await h.desk.settle()
    finally:
        provider.answer_again()
    [retry] = await retries(h, sid)
    assert retry["error_type"] == "UncertainDeliveryError"
    assert "may have been" in retry["hint"]
    assert provider.sends() == sends + 1  # the request did reach the provider


@providers([p for p in EXTERNAL if p.has_token])
async def test_refused_credentials_make_the_channel_unavailable_with_the_reason(
    start_desk: StartDesk, provider: Provider,
) -> None:
    h = await start(start_desk, provider, **provider.bad_credentials)
    health = (await h.client.get("/healthz")).json()
    [state] = health["channels"]
    assert state["available"] is False
    assert state["problem"].startswith(provider.refused_problem)
    assert provider.leaked not in json.dumps(health)
    tools = (await h.client.get(f"/api/conversations/{await h.conversation()}/tools")).json()["tools"]
    assert "handoff_request" not in [t["name"] for t in tools]  # the model is not offered a dead channel


# --------------------------------------------------------------------------- release


@providers([p for p in EXTERNAL if p.release_button])
async def test_the_release_button_releases_once_with_the_release_token(start_desk: StartDesk, provider: Provider) -> None:
    h = await start(start_desk, provider)
    cid, sid, dispatch = await handoff_on(h, provider)
    await provider.press_release(h, dispatch, sid)
    await provider.press_release(h, dispatch, sid)  # a second press, or the provider's retry: nothing more happens
    handoff = await h.handoff(sid)
    assert handoff["state"] == "released"
    assert handoff["release_reason"] == "release_token"
    assert handoff["released_by"] == "Kim"
    assert (await h.kinds(sid)).count("handoff_released") == 1
    [resume] = await h.system_texts(cid)
    assert resume.startswith("[Bot resumed")


@providers([p for p in EXTERNAL if p.release_button])
async def test_the_release_button_reaches_the_core_as_a_typed_press(start_desk: StartDesk, provider: Provider) -> None:
    """A press is a ReleasePress, not the text "/release": nothing a person could type is
    made up for it, and nothing of it is relayed to the subscriber."""
    h = await start(start_desk, provider)
    cid, sid, dispatch = await handoff_on(h, provider)
    await provider.press_release(h, dispatch, sid)
    async with h.desk.db.read() as session:
        [event] = (await session.scalars(select(InboundEvent))).all()
    press = stored_inbound(event.payload)
    assert isinstance(press, ReleasePress)
    assert press.author == "Kim"
    assert press.user_id == provider.presser_id
    assert press.outcome is None
    assert event.result == "released"
    assert [m["role"] for m in await h.messages(cid) if m["role"] == "human"] == []


@providers(EVERY)
async def test_release_typed_in_the_thread_releases_with_outcome_and_note(start_desk: StartDesk, provider: Provider) -> None:
    h = await start(start_desk, provider)
    cid, sid, dispatch = await handoff_on(h, provider)
    await provider.reply(h, dispatch, "/release resolved Re-shipped today")
    handoff = await h.handoff(sid)
    assert handoff["state"] == "released"
    assert handoff["release_reason"] == "release_token"
    assert handoff["outcome"] == "resolved"
    assert handoff["note"] == "Re-shipped today"
    assert handoff["released_by"] == provider.person
    [resume] = await h.system_texts(cid)
    assert resume.startswith("[Bot resumed — the recipient released the conversation. Outcome: resolved.")
    if provider.kind != "owner_inbox":
        [notice] = provider.thread_texts(dispatch)
        assert "released (resolved)" in notice
