"""channels/email/mailbox.py: the loopback mailbox `handoff demo` lets the desk mail into
keeps each message, parsed, by its envelope's recipients (sent with aiosmtplib, as the
email channel sends)."""

from __future__ import annotations

from email.message import EmailMessage

import aiosmtplib
import pytest

from channels.email.mailbox import LoopbackMailbox


async def test_the_mailbox_keeps_each_message_by_its_envelope_recipients() -> None:
    mailbox = await LoopbackMailbox().start()
    try:
        message = EmailMessage()
        message["From"], message["To"], message["Subject"] = "desk@example.com", "olga@example.com", "[Handoff AB12] Ana"
        message.set_content("Summary:\r\nAna needs a person.\r\n")
        message.add_alternative("<p>Ana needs a person.</p>", subtype="html")
        await aiosmtplib.send(message, hostname="127.0.0.1", port=mailbox.port, recipients=["Olga@example.com", "sam@example.com"])
        [kept] = mailbox.to("olga@example.com")
        assert kept.message["subject"] == "[Handoff AB12] Ana"
        assert kept.text == "Summary:\nAna needs a person.\n"  # the plain part, as a mail app shows it
        assert mailbox.to("sam@example.com") == [kept] and mailbox.to("ben@example.com") == []
    finally:
        await mailbox.stop()


def test_a_mailbox_not_started_has_no_port() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        _ = LoopbackMailbox().port
