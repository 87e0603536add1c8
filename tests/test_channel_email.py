"""The email channel: real aiosmtplib against a real aiosmtpd server, and real mail into the
built-in receiver.

Everything of ours runs for real (desk, outbox, inbound, HTTP API); the organisation's mail
server is tests/fake_smtp.py (aiosmtpd on 127.0.0.1, recording every message, scriptable
4xx/5xx answers, AUTH, STARTTLS and implicit TLS with a self-signed certificate), and the
people who reply are aiosmtplib clients writing to the channel's own receiver.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from email.message import EmailMessage
from email.utils import make_msgid
from pathlib import Path
from typing import Any

import aiosmtplib
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
    Outbound,
    PermanentChannelError,
    TransientChannelError,
    UncertainDeliveryError,
)
from channels.email import EmailChannel, EmailConfig, html_to_text, one_line, strip_reply
from tests.approval_actions import TWO_PEOPLE, refund_brief
from tests.approval_actions import refund_action as shared_refund_action
from tests.conftest import Harness, StartDesk, config_problem, make_config
from tests.fake_smtp import FakeSMTP, Received, self_signed_certificate
from tests.imports import imported_modules, importers_of
from tests.office_hours import CLOSED_HOURS, OUTSIDE_HOURS_LINE, closed_clock

TEAM = "team@example.com"
LEAD = "lead@example.com"
DESK = "desk@example.com"
HOSTILE = 'Ana wrote <script>alert(1)</script> & <b>bold</b> "quotes" about order #1234\r\nBcc: victim@example.com'


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    """The channel's behaviour does not depend on the database: SQLite only."""
    return sqlite_url


@pytest.fixture
async def smtp() -> AsyncIterator[FakeSMTP]:
    """Requested before start_desk, so it outlives the desk."""
    server = await FakeSMTP(username="desk", password="s3cret-pass").start()
    yield server
    await server.stop()


def email_channel(server: FakeSMTP, **overrides: Any) -> dict[str, Any]:
    return {
        "id": 4, "kind": "email", "label": "Support mail", "estimated_response": "within the hour",
        "to": [TEAM, LEAD], "from": DESK,
        "smtp": {"host": "127.0.0.1", "port": server.port, "security": "none", "username": "desk", "password": "s3cret-pass",
                 "timeout": 5},
        "inbound": {"host": "127.0.0.1", "port": 0, "address": DESK},
        "reply_token_secret": "reply-token-secret-for-tests",
        **overrides,
    }


async def start(start_desk: StartDesk, server: FakeSMTP, **overrides: Any) -> Harness:
    return await start_desk(channels=[email_channel(server, **overrides)], delivery={"base_backoff": "1ms"})


def adapter_of(harness: Harness) -> EmailChannel:
    adapter = harness.desk.channels.get(4)
    assert isinstance(adapter, EmailChannel)
    return adapter


async def dispatch_of(harness: Harness, smtp: FakeSMTP, cid: str, **fields: Any) -> tuple[str, Received]:
    result = await harness.start_handoff(cid, channel_id=4, **fields)
    mail = smtp.messages[-1]
    assert result["channel_message_id"] == mail.message["Message-ID"]
    return result["handoff_session_id"], mail


def reply_to(original: Received, text: str, *, sender: str = f"Sam Lee <{TEAM}>", html: str | None = None,
             to: str | None = None, **headers: str) -> EmailMessage:
    """A reply as a mail client writes it: to the Reply-To address, in the thread, quoting the original."""
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to or str(original.message["Reply-To"])
    message["Subject"] = "Re: " + str(original.message["Subject"])
    message["Message-ID"] = make_msgid(domain="example.com")
    message["In-Reply-To"] = original.message["Message-ID"]
    message["References"] = original.message["Message-ID"]
    for name, value in headers.items():
        message[name.replace("_", "-")] = value
    message.set_content(text)
    if html is not None:
        message.add_alternative(html, subtype="html")
    return message


async def mail_in(harness: Harness, message: EmailMessage, *, envelope_from: str | None = None,
                  recipients: list[str] | None = None) -> None:
    """Deliver a message to the channel's receiver; raises what aiosmtplib raises (refusals)."""
    sender = envelope_from if envelope_from is not None else message["From"].addresses[0].addr_spec
    async with aiosmtplib.SMTP(hostname="127.0.0.1", port=adapter_of(harness).inbound_port, timeout=10,
                               local_hostname="mx.example.com") as client:
        await client.sendmail(sender, recipients or [message["To"].addresses[0].addr_spec], message.as_bytes())
    await harness.desk.settle()




def standalone(server: FakeSMTP, **overrides: Any) -> EmailChannel:
    entry = email_channel(server, **overrides)
    entry.pop("kind")
    return EmailChannel(EmailConfig.model_validate(entry))


async def nowhere(_message: InboundMessage) -> None:
    return None


CONTEXT = ChannelContext(public_url="http://desk.test", deliver_inbound=nowhere, render=Renderer().render)


def brief_outbound(summary: str = "Ana's order #1234 is a week late.") -> Outbound:
    brief = HandoffBrief(handoff_session_id="hs_standalone", short_code="STAN", conversation_id="c_1",
                         summary=summary, expected_action="Check the carrier.")
    return Dispatch(handoff_id="hs_standalone", text="…", subject=None, brief=brief)


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(("change", "problem"), [
    ({"to": ["team@example.com", "not an address"]}, "channels[0].to: item 1: must be an email address"),
    ({"to": []}, "channels[0].to: List should have at least 1 item"),
    ({"from": "Desk <desk@example.com>"}, "channels[0].from: must be an email address"),
    ({"smtp": {"host": "smtp.example.com", "security": "ssl"}}, "channels[0].smtp.security: Input should be 'starttls', 'tls' or 'none'"),
    ({"smtp": {"host": "smtp.example.com", "username": "desk"}}, "channels[0].smtp: username and password go together"),
    ({"smtp": {"host": "smtp.example.com", "hots": "x"}}, "channels[0].smtp.hots: unknown key; did you mean 'host'?"),
    ({"smtp": {"host": "smtp.example.com", "port": 70000}}, "channels[0].smtp.port: Input should be less than or equal to 65535"),
    ({"inbound": {"address": "desk+x@example.com"}}, "channels[0].inbound.address: must not contain '+'"),
    ({"inbound": {"port": 2525, "adress": DESK}}, "channels[0].inbound.adress: unknown key; did you mean 'address'?"),
    ({"reply_to": "replies"}, "channels[0].reply_to: must be an email address"),
])
def test_config_problems_are_named_by_key_path_without_echoing_secrets(change: dict[str, Any], problem: str) -> None:
    entry = {"id": 1, "kind": "email", "label": "Mail", "to": [TEAM], "from": DESK,
             "smtp": {"host": "smtp.example.com", "username": "desk", "password": "SECRET-pass"}, **change}
    text = config_problem(channels=[entry])
    assert problem in text, text
    assert "SECRET-pass" not in text


def test_a_minimal_config_takes_the_documented_defaults() -> None:
    config = make_config("sqlite:///x.db", channels=[
        {"id": 4, "kind": "email", "label": "Mail", "to": [TEAM], "from_address": DESK, "smtp": {"host": "smtp.example.com"}},
        {"id": 5, "kind": "email", "label": "Mail 2", "to": [TEAM], "from": DESK, "reply_to": "replies@example.com",
         "smtp": {"host": "smtp.example.com", "security": "tls", "username": "u", "password": "p"}, "inbound": {}},
        # the early documented sketch of an email channel keeps working (`from`, `starttls: true`)
        {"id": 6, "kind": "email", "label": "Support mail", "from": "bot@example.com", "to": ["team@example.com"],
         "smtp": {"host": "smtp.example.com", "port": 587, "starttls": True, "username": "u", "password": "p"},
         "inbound": {"host": "0.0.0.0", "port": 2525}},
    ])
    first, second, sketch = config.channels
    assert isinstance(sketch, EmailConfig)
    assert (sketch.smtp.security, sketch.from_address) == ("starttls", "bot@example.com")
    assert isinstance(first, EmailConfig)
    assert isinstance(second, EmailConfig)
    assert (first.smtp.security, first.smtp.effective_port, first.smtp.timeout, first.inbound) == ("starttls", 587, 30.0, None)
    assert (first.reply_mailbox, first.accept_forwarded, first.from_name) == (DESK, True, "Handoff Desk")
    assert (second.smtp.effective_port, second.inbound.host, second.inbound.port) == (465, "127.0.0.1", 2525)
    assert second.reply_mailbox == second.receiving_mailbox == "replies@example.com"
    assert "'p'" not in repr(second)


# --------------------------------------------------------------------------- text helpers


def test_subjects_collapse_line_breaks_and_control_characters() -> None:
    assert one_line("a\r\nBcc: x@y\x00\x1b[31m\u2028b\u202e\tc  d") == "a Bcc: x@y [31m b c d"
    assert one_line("x" * 300, 20) == "x" * 19 + "…"


@pytest.mark.parametrize(("reply", "expected"), [
    ("Thanks, on it.\n\nOn Mon, 3 Jun 2024 at 10:00, Handoff Desk <desk@example.com> wrote:\n> Ana wrote:\n> hi",
     "Thanks, on it."),
    ("Wrapped attribution.\n\nOn Mon, 3 Jun 2024 at 10:00, Handoff Desk <desk+abc@example.com>\nwrote:\n\n> old",
     "Wrapped attribution."),
    ("Answer one.\n> question two?\nAnswer two.\n>> older", "Answer one.\nAnswer two."),
    ("Outlook style.\n\n-----Original Message-----\nFrom: Handoff Desk\nSent: Monday\nSubject: x\n\nold text",
     "Outlook style."),
    ("New Outlook.\n\n________________________________\nFrom: Handoff Desk <desk@example.com>\nSent: Monday, June 3\n"
     "To: Team <team@example.com>\nSubject: Re: [Handoff A7F3]\n\nold", "New Outlook."),
    ("Header block.\n\nFrom: Handoff Desk <desk@example.com>\nDate: Mon, 3 Jun\nTo: team@example.com\nSubject: x\n\nold",
     "Header block."),
    ("With a signature.\n\n-- \nSam Lee\nSupport lead", "With a signature."),
    ("From my phone.\n\nSent from my iPhone", "From my phone."),
    ("From: here is how I start a sentence, not a header.", "From: here is how I start a sentence, not a header."),
    ("On second thought, here is what Sam wrote:\nit ships Monday.", "On second thought, here is what Sam wrote:\nit ships Monday."),
])
def test_quoted_history_and_signatures_are_stripped(reply: str, expected: str) -> None:
    assert strip_reply(reply) == expected


def test_html_replies_become_text_without_their_quoted_part() -> None:
    markup = ('<html><head><style>p {color: red}</style></head><body><div dir="ltr">It ships <b>Monday</b> &amp; '
              'I&#39;ll update you.<br>Sam</div><div class="gmail_quote"><div>On Mon, Desk wrote:</div>'
              '<blockquote>old stuff</blockquote></div><ul><li>one</li><li>two</li></ul></body></html>')
    assert html_to_text(markup) == "It ships Monday & I'll update you.\nSam\n\n• one\n\n• two"


# --------------------------------------------------------------------------- dispatch and relays


async def test_the_dispatch_is_multipart_text_and_escaped_html_with_a_signed_reply_address(
    smtp: FakeSMTP, start_desk: StartDesk,
) -> None:
    harness = await start(start_desk, smtp)
    cid = await harness.conversation(name="Ana <Admin>")
    await harness.say(cid, "My order <b>1234</b> & co never came")
    sid, mail = await dispatch_of(
        harness, smtp, cid, urgency="high", summary=HOSTILE, expected_action="Check <carrier> & tell Ana the ETA.",
        extra_context={"plan": "<pro> & gold"},
        expected_return=[{"name": "eta_date", "type": "date", "required": True, "label": "ETA"}],
    )
    handoff = await harness.handoff(sid)
    message = mail.message
    assert (mail.mail_from, mail.rcpt_tos) == (DESK, [TEAM, LEAD])
    assert smtp.logins == [("desk", True)] * smtp.sessions  # every session logged in (the start probe included)
    # the structure: multipart/alternative, plain text first, HTML last (what clients prefer)
    assert message.get_content_type() == "multipart/alternative"
    assert [p.get_content_type() for p in message.iter_parts()] == ["text/plain", "text/html"]
    assert all(b < 128 for b in mail.raw)  # 7bit on the wire: any server takes it
    # headers: a one-line subject (the CR/LF of the summary could have added a Bcc), ours Message-ID
    subject = str(message["Subject"])
    assert subject.startswith(f"[URGENT] [Handoff {handoff['short_code']}] Ana wrote <script>")
    assert "\n" not in subject
    assert "\r" not in subject
    assert message["Bcc"] is None
    assert b"\nBcc:" not in mail.raw.split(b"\r\n\r\n", 1)[0]  # the summary's "Bcc:" line stayed in the body
    assert str(message["From"]) == f"Handoff Desk <{DESK}>"
    assert str(message["To"]) == f"{TEAM}, {LEAD}"
    assert message["Auto-Submitted"] == "auto-generated"
    adapter = adapter_of(harness)
    token = adapter.token_of(sid)
    assert str(message["Reply-To"]) == f"desk+{token}@example.com"
    assert str(message["Message-ID"]).startswith(f"<hd.{token}.")
    assert str(message["Message-ID"]).endswith("@example.com>")
    assert handoff["short_code"].lower() not in token  # the token is not the guessable short code
    # HTML: every user-derived string escaped
    html = mail.part("text/html")
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;b&gt;bold&lt;/b&gt; &#34;quotes&#34;" in html
    assert "Ana &lt;Admin&gt; needs a person" in html
    assert "Check &lt;carrier&gt; &amp; tell Ana" in html
    assert "&lt;pro&gt; &amp; gold" in html
    assert "My order &lt;b&gt;1234&lt;/b&gt; &amp; co never came" in html
    assert f'<a href="{handoff["form_url"]}"' in html
    assert "ETA [date, YYYY-MM-DD] (required)" in html
    assert ">URGENT<" in html
    # text: the same, as typed
    text = mail.part("text/plain")
    assert "[URGENT] Handoff" in text
    assert "Ana wrote <script>alert(1)</script> & <b>bold</b>" in text
    assert "Ana <Admin>: My order <b>1234</b> & co never came" in text
    assert handoff["form_url"] in text
    assert "• plan: <pro> & gold" in text
    assert "Reply to this email to answer Ana <Admin>" in text
    assert "/release" in text


async def test_relays_and_notices_are_replies_in_the_dispatch_thread(smtp: FakeSMTP, start_desk: StartDesk) -> None:
    harness = await start(start_desk, smtp)
    ana, ben = await harness.conversation("Ana"), await harness.conversation("Ben", email=None)
    sid_a, dispatch_a = await dispatch_of(harness, smtp, ana)
    _sid_b, dispatch_b = await dispatch_of(harness, smtp, ben)
    await harness.say(ana, "Any news <i>yet</i> & when?")
    await harness.desk.settle()
    relay = smtp.messages[-1]
    root = dispatch_a.message["Message-ID"]
    assert (relay.message["In-Reply-To"], relay.message["References"]) == (root, root)
    assert relay.message["Subject"] == "Re: " + dispatch_a.message["Subject"]
    assert relay.message["Reply-To"] == dispatch_a.message["Reply-To"] != dispatch_b.message["Reply-To"]
    assert relay.message["Message-ID"] not in (root, dispatch_b.message["Message-ID"])
    assert relay.part("text/plain").startswith("Ana wrote:\n\nAny news <i>yet</i> & when?\n")
    assert "Any news &lt;i&gt;yet&lt;/i&gt; &amp; when?" in relay.part("text/html")

    response = await harness.client.post(f"/api/handoffs/{sid_a}/release", json={"outcome": "resolved"})
    assert response.status_code == 200, response.text
    await harness.desk.settle()
    notice = smtp.messages[-1]
    assert notice.message["In-Reply-To"] == root
    assert "released by the owner (resolved)" in notice.part("text/plain")


async def test_a_standalone_adapter_collapses_a_hostile_subject_without_a_core_subject(smtp: FakeSMTP) -> None:
    adapter = standalone(smtp)
    await adapter.start(CONTEXT)
    try:
        receipt = await adapter.send(brief_outbound(summary="line one\r\nSubject: forged\n\x00 line two"))
    finally:
        await adapter.stop()
    message = smtp.messages[-1].message
    assert message["Subject"] == "[Handoff STAN] line one Subject: forged line two"
    assert receipt.message_id == message["Message-ID"]
    assert receipt.thread_key == adapter.thread_key_of("hs_standalone")
    assert receipt.thread == {"message_id": receipt.message_id, "subject": message["Subject"]}


# --------------------------------------------------------------------------- SMTP failures


async def test_a_4xx_is_retried_by_the_core(smtp: FakeSMTP, start_desk: StartDesk) -> None:
    harness = await start(start_desk, smtp)
    smtp.fail("MAIL", "451 4.3.0 Mailbox temporarily unavailable")
    cid = await harness.conversation()
    sid, mail = await dispatch_of(harness, smtp, cid)
    retry = [e for e in await harness.events(sid) if e["kind"] == "delivery_retry_scheduled"]
    assert len(retry) == 1
    assert retry[0]["detail"]["error_type"] == "TransientChannelError"
    assert "451 4.3.0 Mailbox temporarily unavailable" in retry[0]["detail"]["hint"]
    assert len(smtp.messages) == 1


@pytest.mark.parametrize(("stage", "reply", "hint"), [
    ("RCPT", "550 5.1.1 <team@example.com>: Recipient address rejected: User unknown",
     "the SMTP server refused the recipients: team@example.com: 550 5.1.1 <team@example.com>: Recipient address rejected"),
    ("DATA", "554 5.7.1 Message rejected as spam", "the SMTP server refused the message at DATA: 554 5.7.1 Message rejected as spam"),
    ("MAIL", "553 5.7.1 Sender address rejected: not owned by user desk",
     "the SMTP server refused the message at MAIL FROM: 553 5.7.1 Sender address rejected"),
])
async def test_a_5xx_fails_the_dispatch_at_once_with_the_servers_words(
    smtp: FakeSMTP, start_desk: StartDesk, stage: str, reply: str, hint: str,
) -> None:
    harness = await start(start_desk, smtp, to=[TEAM])
    smtp.fail(stage, reply)  # type: ignore[arg-type]
    cid = await harness.conversation()
    result = await harness.tool(cid, "handoff_request", {
        "channel_id": 4, "summary": "Ana's order #1234 is a week late.", "expected_action": "Check the carrier."})
    assert result["error"] == "dispatch_failed"
    assert result["details"]["attempts"] == 1
    assert hint in result["details"]["hint"]
    assert (await harness.handoff(result["details"]["handoff_session_id"]))["state"] == "failed"
    assert smtp.messages == []


async def test_one_refused_recipient_of_two_still_delivers_to_the_other(smtp: FakeSMTP) -> None:
    adapter = standalone(smtp)
    await adapter.start(CONTEXT)
    try:
        smtp.fail("RCPT", "550 5.1.1 no such user")
        await adapter.send(brief_outbound())
        smtp.fail("RCPT", "452 4.2.2 mailbox full", times=2)
        with pytest.raises(TransientChannelError) as deferred:
            await adapter.send(brief_outbound())
    finally:
        await adapter.stop()
    assert smtp.messages[-1].rcpt_tos == [LEAD]
    assert len(smtp.messages) == 1
    assert "452 4.2.2 mailbox full" in deferred.value.hint
    assert not isinstance(deferred.value, UncertainDeliveryError)


async def test_refused_credentials_are_an_auth_error_and_the_channel_is_unavailable_with_the_reason(
    smtp: FakeSMTP, start_desk: StartDesk,
) -> None:
    adapter = standalone(smtp, smtp={"host": "127.0.0.1", "port": smtp.port, "security": "none", "username": "desk",
                                     "password": "WRONG-pass"})
    with pytest.raises(ChannelAuthError) as caught:
        await adapter.probe()
    assert caught.value.hint.startswith("the SMTP server refused smtp.username / smtp.password (535")
    assert "WRONG-pass" not in caught.value.hint

    harness = await start(start_desk, smtp, smtp={"host": "127.0.0.1", "port": smtp.port, "security": "none",
                                                  "username": "desk", "password": "WRONG-pass"})
    [state] = (await harness.client.get("/healthz")).json()["channels"]
    assert state["available"] is False
    assert "refused smtp.username / smtp.password" in state["problem"]
    assert adapter_of(harness).inbound_port is None  # the receiver was never started


async def test_probe_logs_in_and_says_who_we_are(smtp: FakeSMTP) -> None:
    assert await standalone(smtp).probe() == f"127.0.0.1:{smtp.port} (no encryption) as desk, sending as {DESK}"
    assert smtp.logins == [("desk", True)]
    assert smtp.messages == []


async def test_a_server_without_auth_works_with_security_none() -> None:
    server = await FakeSMTP().start()
    try:
        adapter = standalone(server, smtp={"host": "127.0.0.1", "port": server.port, "security": "none"}, inbound=None)
        assert await adapter.probe() == f"127.0.0.1:{server.port} (no encryption) without login, sending as {DESK}"
        await adapter.start(CONTEXT)
        await adapter.send(brief_outbound())
        await adapter.stop()
    finally:
        await server.stop()
    assert len(server.messages) == 1
    assert server.logins == []


async def test_an_unreachable_server_is_transient() -> None:
    adapter = EmailChannel(EmailConfig(id=1, label="Mail", to=[TEAM], from_address=DESK,
                                       smtp={"host": "127.0.0.1", "port": 9, "security": "none", "timeout": 5}))
    with pytest.raises(TransientChannelError) as caught:
        await adapter.probe()
    assert not isinstance(caught.value, UncertainDeliveryError)
    assert caught.value.hint.startswith("could not talk to the SMTP server 127.0.0.1:9")


async def test_no_answer_after_the_message_was_handed_over_is_an_uncertain_delivery(smtp: FakeSMTP) -> None:
    adapter = standalone(smtp, smtp={"host": "127.0.0.1", "port": smtp.port, "security": "none", "username": "desk",
                                     "password": "s3cret-pass", "timeout": 0.5})
    await adapter.start(CONTEXT)
    try:
        smtp.hold()
        with pytest.raises(UncertainDeliveryError) as caught:
            await adapter.send(brief_outbound())
    finally:
        smtp.release()
        await adapter.stop()
    assert len(smtp.messages) == 1  # it did reach the server
    assert "it may have been sent" in caught.value.hint
    assert adapter.capabilities.reconcile is False


@pytest.mark.parametrize("security", ["tls", "starttls"])
async def test_tls_and_starttls_with_a_trusted_self_signed_certificate(tmp_path: Path, security: str) -> None:
    certificate = self_signed_certificate(tmp_path)
    server = await FakeSMTP(username="desk", password="pw", security=security, certificate=certificate).start()  # type: ignore[arg-type]
    settings = {"host": "127.0.0.1", "port": server.port, "security": security, "username": "desk", "password": "pw"}
    try:
        untrusted = standalone(server, smtp=settings, inbound=None)
        with pytest.raises(PermanentChannelError) as caught:
            await untrusted.probe()
        assert "is not trusted" in caught.value.hint
        assert "smtp.ca_file" in caught.value.hint

        adapter = standalone(server, smtp={**settings, "ca_file": str(certificate[0])}, inbound=None)
        described = await adapter.probe()
        await adapter.start(CONTEXT)
        await adapter.send(brief_outbound())
        await adapter.stop()
    finally:
        await server.stop()
    assert described.startswith(f"127.0.0.1:{server.port} ({'TLS' if security == 'tls' else 'STARTTLS'}) as desk")
    assert len(server.messages) == 1
    assert ("desk", True) in server.logins


@pytest.mark.parametrize(("security", "hint"), [
    ("tls", "check smtp.security: tls for port 465, starttls for 587"),
    ("starttls", "cannot do what the config asks (SMTP STARTTLS extension not supported by server.)"),
])
async def test_a_security_mode_the_server_does_not_speak_is_permanent_and_names_the_setting(
    smtp: FakeSMTP, security: str, hint: str,
) -> None:
    adapter = standalone(smtp, smtp={"host": "127.0.0.1", "port": smtp.port, "security": security, "timeout": 5}, inbound=None)
    with pytest.raises(PermanentChannelError) as caught:
        await adapter.probe()
    assert hint in caught.value.hint
    assert not isinstance(caught.value, ChannelAuthError)


# --------------------------------------------------------------------------- inbound


async def test_a_reply_reaches_the_subscriber_without_quotes_or_signature(smtp: FakeSMTP, start_desk: StartDesk) -> None:
    harness = await start(start_desk, smtp)
    cid = await harness.conversation()
    sid, dispatch = await dispatch_of(harness, smtp, cid)
    text = ("Hi Ana <3, it ships Monday & I'll send the tracking link.\n\n-- \nSam Lee\nSupport\n\n"
            "On Mon, 3 Jun 2024 at 10:00, Handoff Desk <desk@example.com> wrote:\n> Summary: …\n")
    await mail_in(harness, reply_to(dispatch, text))
    human = (await harness.messages(cid))[-1]
    assert (human["role"], human["author"], human["text"], human["handoff_session_id"]) == (
        "human", "Sam Lee", "Hi Ana <3, it ships Monday & I'll send the tracking link.", sid)

    # an HTML-only reply from Outlook, by address alone (no display name)
    html = ('<div>Checked with the carrier: <b>depot</b>.</div><div id="divRplyFwdMsg"><b>From:</b> Handoff Desk'
            '<br><b>Sent:</b> Monday</div><div>old</div>')
    html_only = reply_to(dispatch, "", sender=LEAD)
    html_only.set_content(html, subtype="html")
    await mail_in(harness, html_only)
    assert await harness.human_texts(cid) == [
        ("Sam Lee", "Hi Ana <3, it ships Monday & I'll send the tracking link."), (LEAD, "Checked with the carrier: depot.")]


async def test_replies_map_by_token_or_by_thread_headers_and_two_handoffs_never_cross(
    smtp: FakeSMTP, start_desk: StartDesk,
) -> None:
    harness = await start(start_desk, smtp)
    ana, ben = await harness.conversation("Ana"), await harness.conversation("Ben", email=None)
    _sid_a, dispatch_a = await dispatch_of(harness, smtp, ana)
    _sid_b, dispatch_b = await dispatch_of(harness, smtp, ben)
    await harness.say(ben, "Ben here")
    await harness.desk.settle()
    relay_b = smtp.messages[-1]
    # by the plus token alone (a client that drops In-Reply-To)
    by_token = reply_to(dispatch_a, "For Ana, by token.")
    del by_token["In-Reply-To"], by_token["References"]
    await mail_in(harness, by_token)
    # by In-Reply-To alone, sent to the bare address (a client that ignored Reply-To)
    by_header = reply_to(relay_b, "For Ben, by header.", to=DESK, sender=f"Kim <{LEAD}>")
    await mail_in(harness, by_header)
    assert await harness.human_texts(ana) == [("Sam Lee", "For Ana, by token.")]
    assert await harness.human_texts(ben) == [("Kim", "For Ben, by header.")]


async def test_strangers_forged_tokens_and_other_mailboxes_are_refused_during_the_smtp_dialogue(
    smtp: FakeSMTP, start_desk: StartDesk,
) -> None:
    harness = await start(start_desk, smtp, accept_forwarded=False)
    cid = await harness.conversation()
    _sid, dispatch = await dispatch_of(harness, smtp, cid)
    token = str(dispatch.message["Reply-To"]).split("+", 1)[1].split("@", 1)[0]
    forged = token[:16] + ("a" if token[16] != "a" else "b") + token[17:]

    with pytest.raises(aiosmtplib.SMTPDataError) as stranger:
        await mail_in(harness, reply_to(dispatch, "I am not on the team.", sender="Mallory <mallory@evil.example>"))
    assert stranger.value.code == 550
    assert "is not a recipient of this desk's handoffs" in stranger.value.message
    with pytest.raises(aiosmtplib.SMTPDataError) as no_thread:
        fresh = reply_to(dispatch, "A new mail, not a reply.", to=DESK)
        del fresh["In-Reply-To"], fresh["References"]
        await mail_in(harness, fresh)
    assert no_thread.value.code == 550
    assert "no handoff found" in no_thread.value.message
    with pytest.raises(aiosmtplib.SMTPDataError) as bad_mac:
        forged_reply = reply_to(dispatch, "Forged token.", to=f"desk+{forged}@example.com", sender="x@evil.example")
        del forged_reply["In-Reply-To"], forged_reply["References"]
        await mail_in(harness, forged_reply)
    assert bad_mac.value.code == 550
    assert "may not write to this desk" in bad_mac.value.message
    with pytest.raises(aiosmtplib.SMTPRecipientsRefused) as elsewhere:
        await mail_in(harness, reply_to(dispatch, "Relay me onwards.", to="someone@else.example"))
    assert elsewhere.value.recipients[0].code == 550
    assert "no such mailbox here" in elsewhere.value.recipients[0].message
    assert await harness.stored_events() == 0
    assert await harness.human_texts(cid) == []


async def test_a_forwarded_handoff_may_be_answered_by_a_colleague_holding_the_token(smtp: FakeSMTP, start_desk: StartDesk) -> None:
    harness = await start(start_desk, smtp)
    cid = await harness.conversation()
    _sid, dispatch = await dispatch_of(harness, smtp, cid)
    await mail_in(harness, reply_to(dispatch, "Colleague here, handling it.", sender="Noor <noor@partner.example>"))
    assert await harness.human_texts(cid) == [("Noor", "Colleague here, handling it.")]


async def test_redeliveries_robots_and_our_own_mail_are_not_relayed(smtp: FakeSMTP, start_desk: StartDesk) -> None:
    harness = await start(start_desk, smtp)
    cid = await harness.conversation()
    _sid, dispatch = await dispatch_of(harness, smtp, cid)
    once = reply_to(dispatch, "Only once, please.")
    await mail_in(harness, once)
    await mail_in(harness, once)  # the sending server did not see our 250 and tries again
    await mail_in(harness, reply_to(dispatch, "I am out of the office until Monday.", Auto_Submitted="auto-replied"))
    await mail_in(harness, reply_to(dispatch, "Vacation.", Precedence="bulk"))
    await mail_in(harness, reply_to(dispatch, "Undeliverable."), envelope_from="")  # a bounce
    echo = reply_to(dispatch, "Our own message came back.")
    del echo["Message-ID"]
    echo["Message-ID"] = f"<hd.{adapter_of(harness).token_of(_sid)}.0123abcd@example.com>"
    await mail_in(harness, echo)
    assert await harness.human_texts(cid) == [("Sam Lee", "Only once, please.")]
    assert await harness.stored_events() == 1


def delivery_status(original: Received, *, action: str = "failed", recipient: str = TEAM, headers_only: bool = False) -> bytes:
    """A bounce as a mail server writes it (RFC 3464): a report with the failed recipient and
    the original message (or only its headers), as the bytes it sends."""
    returned = original.message.as_string()
    if headers_only:
        returned = returned.split("\n\n", 1)[0] + "\n"
    kind = "text/rfc822-headers" if headers_only else "message/rfc822"
    return (
        "From: Mail Delivery System <MAILER-DAEMON@mx.example.com>\n"
        f"To: {DESK}\nSubject: Undelivered Mail Returned to Sender\nAuto-Submitted: auto-replied\n"
        "Message-ID: <dsn.1@mx.example.com>\nMIME-Version: 1.0\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="b1"\n\n'
        "--b1\nContent-Type: text/plain\n\nYour message could not be delivered.\n"
        "--b1\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; mx.example.com\n\n"
        f"Final-Recipient: rfc822; {recipient}\nAction: {action}\nStatus: 5.1.1\n"
        "Diagnostic-Code: smtp; 550 5.1.1 user unknown\n\n"
        f"--b1\nContent-Type: {kind}\n\n{returned}\n--b1--\n"
    ).encode()


async def bounce_in(harness: Harness, raw: bytes) -> None:
    """A report from a mail server: the empty envelope sender of a bounce."""
    async with aiosmtplib.SMTP(hostname="127.0.0.1", port=adapter_of(harness).inbound_port, timeout=10,
                               local_hostname="mx.example.com") as client:
        await client.sendmail("", [DESK], raw)
    await harness.desk.settle()


@pytest.mark.parametrize("headers_only", [False, True])
async def test_a_bounce_of_a_dispatch_fails_its_delivery_and_is_never_relayed(
    smtp: FakeSMTP, start_desk: StartDesk, headers_only: bool,
) -> None:
    harness = await start(start_desk, smtp)
    cid = await harness.conversation()
    sid, dispatch = await dispatch_of(harness, smtp, cid)
    await bounce_in(harness, delivery_status(dispatch, action="delayed"))  # only late: nothing failed
    assert "delivery_failed_after_acceptance" not in await harness.kinds(sid)
    bounce = delivery_status(dispatch, headers_only=headers_only)
    await bounce_in(harness, bounce)
    await bounce_in(harness, bounce)  # the same report again
    [failed] = [e for e in await harness.events(sid) if e["kind"] == "delivery_failed_after_acceptance"]
    assert failed["detail"]["channel_message_id"] == dispatch.message["Message-ID"]
    assert failed["detail"]["hint"] == f"the mail to {TEAM} bounced: 550 5.1.1 user unknown"
    assert failed["detail"]["error"] == "bounced 5.1.1"
    assert await harness.human_texts(cid) == []


async def test_attachments_are_mentioned_and_oversized_mail_is_refused(smtp: FakeSMTP, start_desk: StartDesk) -> None:
    harness = await start(start_desk, smtp, inbound={"host": "127.0.0.1", "port": 0, "address": DESK, "max_message_size": 20_000})
    cid = await harness.conversation()
    _sid, dispatch = await dispatch_of(harness, smtp, cid)
    with_file = reply_to(dispatch, "See the label attached.")
    with_file.add_attachment(b"%PDF-1.4 tiny", maintype="application", subtype="pdf", filename="label.pdf")
    await mail_in(harness, with_file)
    assert await harness.human_texts(cid) == [("Sam Lee", "See the label attached.\n[1 attachment(s) not forwarded: label.pdf]")]
    big = reply_to(dispatch, "Huge photo attached.")
    big.add_attachment(b"\xff" * 30_000, maintype="image", subtype="jpeg", filename="photo.jpg")
    with pytest.raises(aiosmtplib.SMTPResponseException) as caught:
        await mail_in(harness, big)
    assert caught.value.code == 552
    assert len(await harness.human_texts(cid)) == 1


async def test_the_receiver_stops_with_the_desk(smtp: FakeSMTP, start_desk: StartDesk) -> None:
    harness = await start(start_desk, smtp)
    port = adapter_of(harness).inbound_port
    assert port
    await harness.desk.stop()
    with pytest.raises(aiosmtplib.SMTPConnectError):
        await aiosmtplib.send(EmailMessage(), hostname="127.0.0.1", port=port, sender=TEAM, recipients=[DESK], timeout=5)


# --------------------------------------------------------------------------- the whole story


async def test_the_whole_story_through_the_http_api(smtp: FakeSMTP, start_desk: StartDesk) -> None:
    harness = await start(start_desk, smtp)
    cid = await harness.conversation("Ana")
    await harness.say(cid, "My parcel 1234 is lost")
    sid, told = await harness.ask_for_a_person(cid)
    assert told.startswith("I've asked our team to join")
    dispatch = smtp.messages[-1]
    assert "Ana: My parcel 1234 is lost" in dispatch.part("text/plain")

    assert (await harness.say(cid, "Are you there?"))["routed_to"] == "human"
    await harness.desk.settle()
    relay = smtp.messages[-1]
    assert relay.part("text/plain").startswith("Ana wrote:\n\nAre you there?")
    assert relay.message["In-Reply-To"] == dispatch.message["Message-ID"]

    await mail_in(harness, reply_to(relay, "Hi Ana, I'm Sam. Found it at the depot.\n\nOn Mon, 3 Jun 2024 at 10:02, Handoff Desk <desk@example.com> wrote:\n> Are you there?"))
    assert (await harness.messages(cid))[-1]["text"] == "Hi Ana, I'm Sam. Found it at the depot."
    await mail_in(harness, reply_to(dispatch, "/release resolved\nParcel re-routed\n\n-- \nSam"))
    handoff = await harness.handoff(sid)
    assert (handoff["state"], handoff["release_reason"], handoff["outcome"], handoff["note"], handoff["released_by"]) == (
        "released", "release_token", "resolved", "Parcel re-routed", "Sam Lee")
    resumed = next(m for m in await harness.messages(cid) if m["role"] == "system")
    assert resumed["text"].startswith("[Bot resumed — ")
    assert "Outcome: resolved" in resumed["text"]
    notice = smtp.messages[-1]
    assert "released (resolved)" in notice.part("text/plain")
    assert notice.message["In-Reply-To"] == dispatch.message["Message-ID"]
    assert (await harness.say(cid, "Thanks!"))["routed_to"] == "agent"
    # a late reply to a released handoff is stored but relays nothing
    await mail_in(harness, reply_to(dispatch, "One more thing…"))
    assert [t for _a, t in await harness.human_texts(cid)] == ["Hi Ana, I'm Sam. Found it at the depot."]


async def test_idle_release_reaches_the_thread(smtp: FakeSMTP, start_desk: StartDesk) -> None:
    harness = await start(start_desk, smtp)
    cid = await harness.conversation()
    sid, dispatch = await dispatch_of(harness, smtp, cid)
    harness.desk.clock.advance(timedelta(hours=1))
    await harness.desk.timers.sweep()
    await harness.desk.settle()
    assert (await harness.handoff(sid))["release_reason"] == "idle_timeout"
    assert smtp.messages[-1].message["In-Reply-To"] == dispatch.message["Message-ID"]


# --------------------------------------------------------------------------- approvals

APPROVAL_SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                   "required": ["order_id", "amount"], "additionalProperties": False}


def refund_action(**overrides: Any) -> dict[str, Any]:
    return shared_refund_action(4, **{"description": "Refund an order <to> the original payment method & notify", "input_schema": APPROVAL_SCHEMA, **overrides})


async def approval_desk(start_desk: StartDesk, server: FakeSMTP, *actions: dict[str, Any]) -> Harness:
    from tests import approval_actions

    approval_actions.CALLS.clear()
    return await start_desk(channels=[email_channel(server)], delivery={"base_backoff": "1ms"},
                            actions=list(actions) or [refund_action()])


async def gated_call(harness: Harness, smtp: FakeSMTP, cid: str, **arguments: Any) -> tuple[str, Received]:
    aid = await harness.ask_approval(cid, **arguments)
    prompt = smtp.messages[-1]
    assert prompt.message["X-Handoff-Approval"] == aid
    return aid, prompt


def decision_path(prompt: Received) -> str:
    import re

    [url] = set(re.findall(r"http://desk\.test/a/[A-Za-z0-9_.\-]+", prompt.part("text/plain")))
    return url.removeprefix("http://desk.test")


async def decide_on_page(harness: Harness, path: str, decision: str, **form: str) -> Any:
    return await harness.client.post(path, data={"token": path.rsplit("/", 1)[1], "decision": decision, **form})



async def test_an_approval_prompt_is_a_new_escaped_mail_with_the_arguments_and_the_decision_link(
    smtp: FakeSMTP, start_desk: StartDesk,
) -> None:
    harness = await approval_desk(start_desk, smtp)
    cid = await harness.conversation(name="Ana <b>VIP</b>\r\nBcc: x@evil.example")
    sid, _dispatch = await dispatch_of(harness, smtp, cid)  # an open handoff thread does not capture the prompt
    aid, prompt = await gated_call(harness, smtp, cid, order_id="<script>alert(1)</script> & 1234", amount=25.5)
    message = prompt.message
    assert (prompt.mail_from, prompt.rcpt_tos) == (DESK, [TEAM, LEAD])
    assert str(message["Subject"]) == "[Approval needed] refund_order (high risk)"
    assert message["In-Reply-To"] is None
    assert message["References"] is None  # not a reply in any thread
    assert message["Message-ID"] == adapter_of(harness).approval_message_id(aid)
    assert message["Message-ID"].startswith("<ap.")
    assert message["Reply-To"] == "desk+approval@example.com"
    assert message["Auto-Submitted"] == "auto-generated"
    assert [p.get_content_type() for p in message.iter_parts()] == ["text/plain", "text/html"]
    text, html = prompt.part("text/plain"), prompt.part("text/html")
    path = decision_path(prompt)
    assert text.startswith("[HIGH RISK] Approval needed: may the assistant run refund_order for Ana <b>VIP</b> Bcc: x@evil.example?")
    assert '"order_id": "<script>alert(1)</script> & 1234",\n  "amount": 25.5' in text
    assert "Risk:      high" in text
    assert "Deadline:  " in text
    assert f"http://desk.test{path}" in text
    # the HTML part: every value escaped, the arguments as pretty JSON in <pre>, one prominent link
    assert "<script>" not in html
    assert "<b>VIP" not in html
    assert "&#34;order_id&#34;: &#34;&lt;script&gt;alert(1)&lt;/script&gt; &amp; 1234&#34;" in html
    assert "Refund an order &lt;to&gt; the original payment method &amp; notify" in html
    assert f'<a href="http://desk.test{path}"' in html
    assert ">Approve or deny</a>" in html
    assert "<pre" in html
    assert "HIGH RISK" in html
    assert "no answer by then means denied" in html
    assert (await harness.client.get(path)).status_code == 200  # the link opens the signed page
    assert (await harness.approval(aid))["state"] == "pending"
    assert (await harness.handoff(sid))["state"] == "active"


async def test_approving_on_the_page_runs_the_action_and_the_closing_mail_answers_the_prompt(
    smtp: FakeSMTP, start_desk: StartDesk,
) -> None:
    from tests import approval_actions

    harness = await approval_desk(start_desk, smtp)
    cid = await harness.conversation()
    aid, prompt = await gated_call(harness, smtp, cid, order_id="1234", amount=25.5)
    path = decision_path(prompt)
    assert (await decide_on_page(harness, path, "approve", name="Kim")).status_code == 200
    await harness.desk.settle()
    assert approval_actions.CALLS == [{"order_id": "1234", "amount": 25.5}]
    assert (await harness.system_texts(cid))[0].startswith("[Approval — refund_order was approved and ran")
    closed = smtp.messages[-1]
    assert closed.message["In-Reply-To"] == closed.message["References"] == prompt.message["Message-ID"]
    assert str(closed.message["Subject"]) == "Re: [Approval needed] refund_order (high risk)"
    assert closed.message["Message-ID"] == adapter_of(harness).approval_message_id(aid, "closed")
    assert closed.part("text/plain").startswith(f"Approved by Kim (decision link): refund_order ({aid}) will run.")
    assert "no longer accepts answers" in closed.part("text/html")
    # a replayed or forged press changes nothing
    replay = await decide_on_page(harness, path, "deny")
    assert replay.status_code == 410
    assert "changed nothing" in replay.text
    assert (await decide_on_page(harness, path[:-4] + "abcd", "deny")).status_code == 404
    assert (await harness.approval(aid))["state"] == "approved"
    assert len(approval_actions.CALLS) == 1
    assert len(smtp.messages) == 2


async def test_denying_on_the_page_is_permission_denied_and_the_closing_mail_says_so(smtp: FakeSMTP, start_desk: StartDesk) -> None:
    from tests import approval_actions

    harness = await approval_desk(start_desk, smtp)
    cid = await harness.conversation()
    aid, prompt = await gated_call(harness, smtp, cid, order_id="1234", amount=900)
    response = await decide_on_page(harness, decision_path(prompt), "deny", reason="Over the limit")
    assert response.status_code == 200
    await harness.desk.settle()
    assert approval_actions.CALLS == []
    [note] = await harness.system_texts(cid)
    assert note.startswith("[Approval — refund_order: PERMISSION_DENIED. A person denied it: Over the limit.")
    closed = smtp.messages[-1]
    assert closed.message["In-Reply-To"] == prompt.message["Message-ID"]
    assert closed.part("text/plain").startswith("Denied by decision link holder: refund_order")


async def test_an_unanswered_prompt_expires_and_the_closing_mail_says_nobody_answered(smtp: FakeSMTP, start_desk: StartDesk) -> None:
    harness = await approval_desk(start_desk, smtp, refund_action(timeout="1m"))
    cid = await harness.conversation()
    _aid, prompt = await gated_call(harness, smtp, cid, order_id="1", amount=1)
    harness.desk.clock.advance(timedelta(seconds=61))  # type: ignore[attr-defined]
    assert await harness.desk.approvals.expire_due() == 1
    await harness.desk.settle()
    closed = smtp.messages[-1]
    assert closed.message["In-Reply-To"] == prompt.message["Message-ID"]
    assert closed.part("text/plain").startswith("Nobody answered in time: refund_order")


async def test_replies_to_approval_mails_are_refused_and_never_count_as_a_decision(smtp: FakeSMTP, start_desk: StartDesk) -> None:
    from tests import approval_actions

    harness = await approval_desk(start_desk, smtp)
    cid = await harness.conversation()
    _sid, dispatch = await dispatch_of(harness, smtp, cid)
    aid, prompt = await gated_call(harness, smtp, cid, order_id="1234", amount=5)
    with pytest.raises(aiosmtplib.SMTPDataError) as by_address:
        await mail_in(harness, reply_to(prompt, "Yes, approved!"))
    assert by_address.value.code == 550
    assert "open the decision link" in by_address.value.message
    with pytest.raises(aiosmtplib.SMTPDataError) as by_headers:  # written to the plain mailbox, in the prompt's thread
        await mail_in(harness, reply_to(prompt, "Approve", to=DESK))
    assert by_headers.value.code == 550
    assert "not answered by email" in by_headers.value.message
    with pytest.raises(aiosmtplib.SMTPDataError) as stranger:
        await mail_in(harness, reply_to(prompt, "approve", sender="mallory@evil.example"))
    assert stranger.value.code == 550
    assert "not answered by email" in stranger.value.message
    # the address written to decides: a reply to the handoff address in a mixed thread is a handoff reply
    mixed = reply_to(dispatch, "Handoff answer.")
    mixed.replace_header("References", f"{dispatch.message['Message-ID']} {prompt.message['Message-ID']}")
    await mail_in(harness, mixed)
    assert await harness.human_texts(cid) == [("Sam Lee", "Handoff answer.")]
    assert await harness.stored_events() == 1
    assert approval_actions.CALLS == []
    assert (await harness.approval(aid))["state"] == "pending"
    # our own prompt coming back (a recipient list that includes the desk) is dropped quietly
    echo = reply_to(prompt, "echo")
    echo.replace_header("Message-ID", str(prompt.message["Message-ID"]))
    await mail_in(harness, echo)
    assert await harness.stored_events() == 1


async def test_a_two_person_prompt_says_so_in_both_parts_and_a_one_person_prompt_does_not(smtp: FakeSMTP) -> None:
    adapter = standalone(smtp)
    await adapter.start(CONTEXT)
    try:
        await adapter.send(ApprovalPrompt(text="…", approval=refund_brief("ap_1", subscriber_name="Ana <b>")))
        await adapter.send(ApprovalPrompt(text="…", approval=refund_brief("ap_1", subscriber_name="Ana <b>", approvals_required=2)))
    finally:
        await adapter.stop()
    one, two = smtp.messages[-2:]
    line = f"\n{TWO_PEOPLE}\n"
    assert f"(no answer by then means denied)\n{line}\nExactly these arguments:" in two.part("text/plain")
    assert two.part("text/plain").replace(line, "", 1) == one.part("text/plain")
    html_line = f'<p style="margin: 12px 0 0 0;"><strong>{TWO_PEOPLE}</strong></p>\n'
    assert f"</table>\n{html_line}" in two.part("text/html")
    assert two.part("text/html").replace(html_line, "", 1) == one.part("text/html")
    assert "two people" not in one.part("text/plain") + one.part("text/html")


async def test_a_standalone_adapter_cuts_huge_arguments_visibly_and_closes_without_the_prompt_subject(smtp: FakeSMTP) -> None:
    from channels.base import ApprovalBrief

    adapter = standalone(smtp)
    await adapter.start(CONTEXT)
    try:
        brief = ApprovalBrief(approval_id="ap_big", action_id="import_rows", description="Import rows", risk="low",
                              arguments={"rows": ["x" * 100] * 1000}, conversation_id="c_1", decision_url="http://desk.test/a/t",
                              allow_always=True, expires_at="2026-03-14T10:05:00")
        await adapter.send(ApprovalPrompt(text="…", approval=brief))
        text = smtp.messages[-1].part("text/plain")
        assert str(smtp.messages[-1].message["Subject"]) == "[Approval needed] import_rows (low risk)"
        assert "Deadline:  14 Mar 2026, 10:05 UTC" in text
        assert "[… cut here: " in text
        assert "The decision page shows every argument.]" in text
        assert "http://desk.test/a/t" in text
        with pytest.raises(ValidationError):  # a prompt without its brief cannot even be built
            ApprovalPrompt.model_validate({"text": "…"})

        fresh = standalone(smtp)  # after a restart: the prompt's subject is not known, the thread headers still are
        await fresh.start(CONTEXT)
        closed_text = "Nobody answered in time: x (ap_old) was denied and will not run."
        receipt = await fresh.send(ApprovalClosed(text=closed_text, approval=refund_brief("ap_old")))
        closed = smtp.messages[-1].message
        assert closed["In-Reply-To"] == fresh.approval_message_id("ap_old") == adapter.approval_message_id("ap_old")
        assert str(closed["Subject"]) == f"[Approval closed] {closed_text}"
        assert receipt.message_id == closed["Message-ID"]
        assert receipt.thread_key is None
        await fresh.stop()
    finally:
        await adapter.stop()


EMAIL_PACKAGE = Path(__file__).resolve().parent.parent / "channels" / "email"


def test_the_email_package_keeps_sending_receiving_and_parsing_apart() -> None:
    """channels/email/ is split by concern: only the SMTP client talks to the mail server
    (aiosmtplib), only the receiver (and the demo's loopback mailbox, a server of its own)
    listens (aiosmtpd), and the reply parser is pure (the standard library and the package's
    own text helpers), so each can be read alone."""
    assert importers_of(EMAIL_PACKAGE, "aiosmtplib") == ["smtp"]
    assert importers_of(EMAIL_PACKAGE, "aiosmtpd") == ["mailbox", "receiver"]
    parser_imports = imported_modules(EMAIL_PACKAGE / "replies.py")
    outside = {m for m in parser_imports if m.split(".")[0] not in sys.stdlib_module_names and m != "channels.email.text"}
    assert outside == set(), f"the reply parser imports {sorted(outside)}"


async def test_a_dispatch_outside_office_hours_says_so_in_both_parts(smtp: FakeSMTP, start_desk: StartDesk) -> None:
    harness = await start_desk(channels=[email_channel(smtp, hours="mondays")], hours=CLOSED_HOURS, clock=closed_clock())
    _sid, mail = await dispatch_of(harness, smtp, await harness.conversation())
    assert mail.part("text/plain").splitlines()[1] == OUTSIDE_HOURS_LINE
    assert f"{OUTSIDE_HOURS_LINE}</p>" in mail.part("text/html")
